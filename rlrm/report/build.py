"""`rlrm report` as a library call: read folders, draw every figure, write summary.md (+ report.html).

    result = build_report([Path("runs/a"), Path("runs/b")], ReportOptions(out=Path("reports/ab")))
    result.files, result.notes

What cannot be drawn from what a folder holds is skipped with a note (in summary.md and in
`result.notes`); options that make no sense, or inputs that are not rlrm folders, raise an
RlrmError.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from rlrm.errors import ConfigError, RunFolderError, writing_to
from rlrm.report import sections
from rlrm.report.document import Document, Section
from rlrm.report.figures import FORMATS, FigureSkipped, embeddable, save_figure
from rlrm.report.folders import BenchData, ParityData, RewardAuditData, RunData, expand_inputs, load_folder
from rlrm.report.html import to_html
from rlrm.report.series import X_AXES
from rlrm.report.timeline import parse_steps


@dataclass
class ReportOptions:
    out: Path
    x: str = "step"  # step | time | samples
    smooth: float = 0.0  # EMA weight in [0, 1)
    metrics: list[str] = field(default_factory=list)  # globs; empty = the default curves
    fmt: str = "png"  # png | svg | pdf
    html: bool = False
    steps: str | None = None  # timeline window "A:B"


@dataclass
class ReportResult:
    out: Path
    files: list[Path]  # every file written, figures first
    notes: list[str]  # what was skipped or left out, and why
    summary: Path
    html: Path | None = None


class FigureWriter:
    """Saves figures into the output folder and adds them to a section; a skip becomes a note."""

    def __init__(self, out: Path, fmt: str, html: bool, notes: list[str]):
        self.out, self.fmt, self.html, self.notes = out, fmt, html, notes
        self.files: list[Path] = []

    def emit(self, section: Section, name: str, make) -> bool:
        """Draw `make()` and save it as `<name>.<fmt>`; False (and a note) if it was skipped."""
        try:
            fig = make()
        except FigureSkipped as skip:
            self.notes.append(f"figure {name} skipped: {skip}")
            return False
        path = save_figure(fig, self.out, name, self.fmt)
        self.files.append(path)
        section.figure(name, path.name, embeddable(fig, path, name) if self.html else "")
        return True


def build_report(paths: list[Path], options: ReportOptions) -> ReportResult:
    """Write the report for `paths` (run, benchmark or parity folders) into `options.out`."""
    _check(paths, options)
    steps = parse_steps(options.steps)
    notes: list[str] = []
    paths = expand_inputs(paths)
    unique = list(dict.fromkeys(Path(p).resolve() for p in paths))
    if len(unique) < len(paths):  # the same folder twice: one legend entry, not two named by the root up
        notes.append("a folder given more than once is reported once")
        paths = [next(p for p in paths if Path(p).resolve() == u) for u in unique]
    folders = [load_folder(p, notes, name) for p, name in zip(paths, _names(paths))]
    runs = [f for f in folders if isinstance(f, RunData)]
    benches = [f for f in folders if isinstance(f, BenchData)]
    parities = [f for f in folders if isinstance(f, ParityData)]
    audits = [f for f in folders if isinstance(f, RewardAuditData)]
    if runs and not benches and not parities and all(run.metrics.empty for run in runs):
        names = ", ".join(str(run.path / "metrics.jsonl") for run in runs)
        raise RunFolderError(f"nothing to report: no complete rows in {names}")

    out = Path(options.out).resolve()  # `--out .` too: its partial sibling is named from the real folder
    check_out(out)
    final, out = out, out.parent / f".{out.name}.partial"  # written aside, put in place whole
    shutil.rmtree(out, ignore_errors=True)  # what an interrupted report left
    out.mkdir(parents=True)
    try:
        result = _write(out, folders, runs, benches, parities, audits, options, steps, notes)
        return _put_in_place(result, out, final)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise


def _write(out: Path, folders, runs, benches, parities, audits, options: ReportOptions, steps, notes) -> ReportResult:
    doc = Document("rlrm report", notes=notes)
    sections.inputs_section(doc, folders)
    writer = FigureWriter(out, options.fmt, options.html, notes)
    if runs:
        sections.runs_section(doc, runs, options, steps, writer)
        sections.audit_section(doc, runs, writer)
    elif options.metrics:
        notes.append("--metrics selects training curves of run folders; no run folder was given")
    for bench in benches:
        sections.bench_section(doc, bench, _prefix("bench", bench, benches), steps, writer)
    for parity in parities:
        sections.parity_section(doc, parity, _prefix("parity", parity, parities), writer)
    for audit in audits:
        sections.reward_audit_section(doc, audit, _prefix("reward_audit", audit, audits), writer)

    summary = out / "summary.md"
    with writing_to(summary):
        summary.write_text(doc.to_markdown(), encoding="utf-8")
    result = ReportResult(out=out, files=[*writer.files, summary], notes=notes, summary=summary)
    if options.html:
        result.html = out / "report.html"
        with writing_to(result.html):
            result.html.write_text(to_html(doc), encoding="utf-8")
        result.files.append(result.html)
    return result


def check_out(out: Path) -> None:
    """--out must be new, empty, or an earlier report (replaced whole): never a folder of other files."""
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"--out {out} is a file; give a folder")
    if out == Path.cwd() or out in Path.cwd().parents:
        raise RunFolderError(f"--out {out} is this folder or one above it; give a folder for the report")
    if out.is_dir():
        others = sorted(p.name for p in out.iterdir() if not _report_file(p))
        if others:
            raise RunFolderError(
                f"--out {out} holds files a report does not write ({', '.join(others[:3])}"
                f"{', ...' if len(others) > 3 else ''}); give a new folder, or an earlier report's to replace it"
            )


def _report_file(path: Path) -> bool:
    return path.is_file() and (path.suffix.lstrip(".") in FORMATS or path.name in ("summary.md", "report.html"))


def _put_in_place(result: ReportResult, written: Path, final: Path) -> ReportResult:
    """The finished report replaces `final` (an earlier report's figures never mix with this one's)."""
    earlier = final.parent / f".{final.name}.earlier"
    shutil.rmtree(earlier, ignore_errors=True)
    if earlier.exists():  # one a failed removal left (files in it we may not delete): another name for this one
        earlier = Path(tempfile.mkdtemp(prefix=f".{final.name}.earlier-", dir=final.parent))
        earlier.rmdir()
    if final.is_dir():
        final.rename(earlier)  # aside, not removed, until the new report is in place
    try:
        written.rename(final)
    except BaseException:
        if earlier.is_dir() and not final.exists():
            earlier.rename(final)  # the earlier report back where it was
        raise
    shutil.rmtree(earlier, ignore_errors=True)
    moved = [final / p.name for p in result.files]
    return ReportResult(
        out=final,
        files=moved,
        notes=result.notes,
        summary=final / result.summary.name,
        html=final / result.html.name if result.html is not None else None,
    )


def _check(paths: list[Path], options: ReportOptions) -> None:
    if not paths:
        raise ConfigError("give at least one run, benchmark, parity or reward audit folder")
    if options.x not in X_AXES:
        raise ConfigError(f"--x must be one of {', '.join(X_AXES)}, not {options.x!r}")
    if options.fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, not {options.fmt!r}")
    if not 0.0 <= options.smooth < 1.0:
        raise ConfigError(f"--smooth is an EMA weight in [0, 1) (e.g. 0.9), not {options.smooth}")


def _names(paths: list[Path]) -> list[str]:
    """Legend names: the folder name, with parent folders added until the names are unique."""
    resolved = [Path(p).resolve() for p in paths]
    depth = 1
    while True:
        names = ["/".join(p.parts[-depth:]) for p in resolved]
        if len(set(names)) == len(names) or depth >= max(len(p.parts) for p in resolved):
            return names
        depth += 1


def _prefix(kind: str, folder, same_kind: list) -> str:
    if len(same_kind) == 1:
        return kind
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in folder.name)
    return f"{kind}-{safe}"
