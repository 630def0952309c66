"""What `rlrm report` reads: run, benchmark and parity folders, recognised by the files they hold.

    folder = load_folder(Path("runs/a"), notes)   # -> RunData | BenchData | ParityData

- run folder: `metrics.jsonl` (+ `config.yaml`, `trace.json`), written by `rlrm train`;
- benchmark folder: `results.csv` or `results.parquet` (+ `summary.json`, `runs/<name>/`), written
  by `rlrm bench reward-latency`;
- parity folder: `scores.parquet` or `summary.json` with a `verdict` (+ `train/{legacy,loop}/`),
  written by `rlrm parity disrm`; a parity matrix folder (`matrix.json`, one parity folder per
  compared pair) is read as its pairs;
- reward audit folder: `audit.json` (+ `audit.csv`, `audit.png`), written by `rlrm audit reward --out`.

Loaders are tolerant: a truncated metrics line is skipped and counted, a missing optional file
leaves a field empty, and each such thing is appended to `notes` (shown to the user).
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rlrm.errors import RunFolderError
from rlrm.results_file import read_complete_csv

if TYPE_CHECKING:
    import pandas as pd

EXPECTED_FILES = (
    "metrics.jsonl (run folder), results.csv or results.parquet (benchmark folder), "
    "scores.parquet or summary.json with a verdict (parity folder), matrix.json (parity matrix), "
    "audit.json (reward audit)"
)


@dataclass
class RunData:
    """One training run: its metrics table (one row per step) and where its trace is."""

    path: Path
    name: str
    metrics: pd.DataFrame  # sorted by step, one row per step
    mode: str | None = None
    skipped_rows: int = 0
    trace_path: Path | None = None

    @property
    def last_step(self) -> int | None:
        if "step" not in self.metrics.columns or self.metrics.empty:
            return None
        return int(self.metrics["step"].max())


@dataclass
class BenchData:
    """A reward-latency benchmark: the results table, its summary, and the run folders it made."""

    path: Path
    name: str
    results: pd.DataFrame  # one row per run (mode, repeat, latency, ...)
    summary: dict = field(default_factory=dict)
    runs: dict[str, RunData] = field(default_factory=dict)  # keyed by results.run_dir


@dataclass
class ParityData:
    """A DisRM parity check: per-sample scores, summary statistics, optional training curves."""

    path: Path
    name: str
    scores: pd.DataFrame | None = None
    summary: dict = field(default_factory=dict)
    train: dict[str, RunData] = field(default_factory=dict)  # "legacy" / "loop"


@dataclass
class RewardAuditData:
    """A reward audit (`rlrm audit reward --out`): its audit.json, as written."""

    path: Path
    name: str
    audit: dict = field(default_factory=dict)


def folder_kind(path: Path) -> str | None:
    """'run', 'bench', 'parity', 'reward-audit' or None, from the files `path` holds."""
    if (path / "results.csv").is_file() or (path / "results.parquet").is_file():
        return "bench"
    if (path / "scores.parquet").is_file() or _is_parity_summary(path / "summary.json"):
        return "parity"
    if (path / "metrics.jsonl").is_file():
        return "run"
    if (path / "audit.json").is_file():
        return "reward-audit"
    return None


def expand_inputs(paths: list[Path]) -> list[Path]:
    """The folders to report: a parity matrix (matrix.json beside one parity folder per compared
    pair) stands for its pairs; every other path stands for itself."""
    expanded = []
    for path in map(Path, paths):
        if path.is_dir() and folder_kind(path) is None and (path / "matrix.json").is_file():
            cells = sorted(p for p in path.iterdir() if p.is_dir() and folder_kind(p) == "parity")
            if cells:
                expanded.extend(cells)
                continue
        expanded.append(path)
    return expanded


def load_folder(path: Path, notes: list[str], name: str | None = None):
    """Load `path` as whichever kind of rlrm folder it is; RunFolderError if it is none."""
    path = Path(path)
    if not path.exists():
        raise RunFolderError(f"{path} does not exist (expected a folder with {EXPECTED_FILES})")
    if not path.is_dir():
        raise RunFolderError(f"{path} is a file, not a folder (expected a folder with {EXPECTED_FILES})")
    kind = folder_kind(path)
    name = name or path.resolve().name
    if kind == "run":
        return load_run(path, notes, name)
    if kind == "bench":
        return load_bench(path, notes, name)
    if kind == "parity":
        return load_parity(path, notes, name)
    if kind == "reward-audit":
        return load_reward_audit(path, name)
    inner = sorted(p.name for p in path.iterdir() if p.is_dir() and folder_kind(p))
    listed = ", ".join(inner[:4]) + (", ..." if len(inner) > 4 else "")
    hint = f"; it holds {len(inner)} rlrm folder(s) ({listed}): pass those instead" if inner else ""
    raise RunFolderError(f"{path} is not an rlrm folder: expected {EXPECTED_FILES}{hint}")


def load_run(path: Path, notes: list[str], name: str | None = None) -> RunData:
    """A run folder; a crashed run is read up to its last complete row."""
    name = name or Path(path).resolve().name
    rows, skipped = read_jsonl(path / "metrics.jsonl")
    if skipped:
        notes.append(f"{name}: skipped {skipped} incomplete line(s) of metrics.jsonl, used {len(rows)} complete row(s)")
    if not rows:
        notes.append(f"{name}: metrics.jsonl has no complete rows")
    frame = metrics_frame(rows)
    nonfinite = frame.isin([math.inf, -math.inf]).to_numpy().sum() + sum(
        isinstance(v, float) and math.isnan(v) for r in rows for v in r.values()
    )
    if nonfinite:
        notes.append(f"{name}: metrics.jsonl holds {nonfinite} NaN or infinite value(s), drawn as gaps")
        frame = frame.replace([math.inf, -math.inf], math.nan)
    trace = path / "trace.json"
    return RunData(
        path=Path(path),
        name=name,
        metrics=frame,
        mode=_run_mode(path / "config.yaml"),
        skipped_rows=skipped,
        trace_path=trace if trace.is_file() else None,
    )


def read_jsonl(path: Path) -> tuple[list[dict], int]:
    """The complete JSON-object lines of `path` and how many other non-blank lines were skipped."""
    loads = json_loads()
    rows, skipped = [], 0
    for line in Path(path).read_bytes().splitlines():
        if not line.strip():
            continue
        try:
            row = loads(line)
        except ValueError:  # json.JSONDecodeError, orjson.JSONDecodeError, bad UTF-8
            try:  # orjson refuses NaN and Infinity, which Python's json writes and reads: a row, not a broken line
                row = json.loads(line)
            except ValueError:
                skipped += 1
                continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            skipped += 1
    return rows, skipped


def json_loads():
    """orjson.loads when it is installed (3x faster on long metrics files), else json.loads."""
    try:
        import orjson
    except ImportError:
        return json.loads
    return orjson.loads


def metrics_frame(rows: list[dict]):
    """Rows -> DataFrame with numeric columns, one row per step (a repeated step keeps its last row)."""
    import pandas as pd

    frame = pd.DataFrame.from_records(rows)
    if frame.empty:
        return pd.DataFrame({"step": pd.Series(dtype=float)})
    for col in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[col]):
            frame[col] = pd.to_numeric(frame[col], errors="coerce")
    if "step" not in frame.columns:
        frame["step"] = range(1, len(frame) + 1)  # rows are one per step, in order
    frame = frame.dropna(subset=["step"]).drop_duplicates("step", keep="last")
    return frame.sort_values("step", kind="stable").reset_index(drop=True)


def load_bench(path: Path, notes: list[str], name: str | None = None) -> BenchData:
    """A benchmark folder; run folders that are missing are noted, not fatal."""
    import pandas as pd

    name = name or Path(path).resolve().name
    table = path / "results.csv" if (path / "results.csv").is_file() else path / "results.parquet"
    try:
        if table.suffix == ".csv":  # a cut file parses, with a changed last row: refused as bench simulate does
            results = pd.read_csv(io.StringIO(read_complete_csv(table)))
        else:
            results = pd.read_parquet(table)
    except (ValueError, OSError) as exc:  # pandas' parser errors and pyarrow's are ValueErrors
        raise RunFolderError(f"{table} is unreadable: {exc}") from None
    summary = _read_json(path / "summary.json", notes, name)
    runs = {}
    for run_dir in results.get("run_dir", pd.Series(dtype=str)).dropna().astype(str):
        run_path = path / run_dir
        if (run_path / "metrics.jsonl").is_file():
            runs[run_dir] = load_run(run_path, notes, Path(run_dir).name)
        else:
            notes.append(f"{name}: run folder {run_dir} has no metrics.jsonl")
    if summary.get("missing"):
        notes.append(f"{name}: runs that did not finish: {', '.join(map(str, summary['missing']))}")
    return BenchData(path=Path(path), name=name, results=results, summary=summary, runs=runs)


def load_parity(path: Path, notes: list[str], name: str | None = None) -> ParityData:
    """A parity folder: scores.parquet, summary.json and optional train/{legacy,loop} run folders."""
    import pandas as pd

    name = name or Path(path).resolve().name
    scores = None
    if (path / "scores.parquet").is_file():
        try:
            scores = pd.read_parquet(path / "scores.parquet")
        except (ValueError, OSError) as exc:
            raise RunFolderError(f"{path / 'scores.parquet'} is unreadable: {exc}") from None
    else:
        notes.append(f"{name}: no scores.parquet; per-sample parity figures skipped")
    summary = _read_json(path / "summary.json", notes, name)
    train = {}
    for side in ("legacy", "loop"):
        run_path = path / "train" / side
        if (run_path / "metrics.jsonl").is_file():
            train[side] = load_run(run_path, notes, side)
    return ParityData(path=Path(path), name=name, scores=scores, summary=summary, train=train)


def load_reward_audit(path: Path, name: str | None = None) -> RewardAuditData:
    """A reward audit folder; an audit.json that is not the audit's is a RunFolderError."""
    name = name or Path(path).resolve().name
    try:
        data = json.loads((Path(path) / "audit.json").read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunFolderError(f"{path / 'audit.json'} is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("attacks"), list) or "settings" not in data:
        raise RunFolderError(f"{path / 'audit.json'} is not a reward audit (no attacks and settings)")
    return RewardAuditData(path=Path(path), name=name, audit=data)


def _read_json(path: Path, notes: list[str], name: str) -> dict:
    if not path.is_file():
        notes.append(f"{name}: no {path.name}")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        notes.append(f"{name}: {path.name} is not valid JSON ({exc}); ignored")
        return {}
    return data if isinstance(data, dict) else {}


def _is_parity_summary(path: Path) -> bool:
    if not path.is_file() or (path.parent / "runs").is_dir():
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and "verdict" in data


def _run_mode(config_path: Path) -> str | None:
    if not config_path.is_file():
        return None
    import yaml

    try:
        config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError):  # not a run's config: no mode to show
        return None
    trainer = config.get("trainer") if isinstance(config, dict) else None
    return trainer.get("mode") if isinstance(trainer, dict) else None
