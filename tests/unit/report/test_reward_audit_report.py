"""`rlrm report` reads a reward audit folder (`rlrm audit reward --out DIR`): its table, verdict and figure."""

from __future__ import annotations

import json

import pytest

from rlrm.errors import RunFolderError
from rlrm.report.build import ReportOptions, build_report


def row(name: str, group: str, rewarded: int, scored: int = 10) -> dict:
    rate = rewarded / scored
    return {"name": name, "group": group, "example": ":", "scored": scored, "failed": 0, "rewarded": rewarded,
            "rate": rate, "ci95_low": max(0.0, rate - 0.2), "ci95_high": min(1.0, rate + 0.2), "mean_score": rate, "cut": 0}  # fmt: skip


def write_audit(folder, **changes):
    folder.mkdir()
    audit = {
        "profile": "tiny-genrm", "reward": "genrm", "model": "tiny:judge", "threshold": 0.5,
        "threshold_rule": "half marks", "prompts": 10, "settings": {"max_attack_rate": 0.01, "min_reference_rate": 0.9},
        "passed": False, "failed_attacks": ["key-colon"],
        "references": [row("reference", "reference", 10), row("reference-bare", "reference", 5)],
        "attacks": [row("key-colon", "master key", 2), row("empty", "format", 0)],
    }  # fmt: skip
    (folder / "audit.json").write_text(json.dumps(audit | changes))
    return folder


def test_an_audit_folder_is_reported_with_its_table_verdict_and_figure(tmp_path):
    result = build_report([write_audit(tmp_path / "audit")], ReportOptions(out=tmp_path / "report"))
    summary = result.summary.read_text()
    assert "| audit | reward audit |" in summary and "FAIL (key-colon)" in summary
    assert "| key-colon | master key | 2/10 | 0.2 |" in summary
    assert [f.name for f in result.files] == ["reward_audit.png", "summary.md"]


def test_an_audit_json_of_something_else_is_named(tmp_path):
    folder = tmp_path / "x"
    folder.mkdir()
    (folder / "audit.json").write_text(json.dumps({"verdict": "?"}))
    with pytest.raises(RunFolderError, match=r"audit.json is not a reward audit"):
        build_report([folder], ReportOptions(out=tmp_path / "report"))


def test_an_inconclusive_audit_is_reported_as_such_naming_the_unmeasured_attacks(tmp_path):
    unmeasured = row("key-colon", "master key", 0) | {"scored": 0, "failed": 10, "defaulted": 0, "rate": float("nan")}
    folder = write_audit(
        tmp_path / "audit",
        passed=False,
        failed_attacks=[],
        verdict="inconclusive",
        inconclusive=["key-colon"],
        attacks=[unmeasured, row("empty", "format", 0)],
    )
    summary = build_report([folder], ReportOptions(out=tmp_path / "report")).summary.read_text()
    assert "INCONCLUSIVE (key-colon)" in summary and "FAIL" not in summary
    assert "| key-colon | master key | 0/0 |" in summary


def test_out_is_replaced_whole_and_a_folder_of_other_files_is_refused(tmp_path, monkeypatch):
    from rlrm.report import sections

    audit, out = write_audit(tmp_path / "audit"), tmp_path / "report"
    out.mkdir()
    (out / "report.html").write_text("an earlier report's page")  # a report of other folders, with --html
    (out / "bench_timeline.png").write_bytes(b"old")
    build_report([audit], ReportOptions(out=out))
    assert sorted(p.name for p in out.iterdir()) == ["reward_audit.png", "summary.md"]  # nothing stale beside it
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def breaks(*_):
        raise KeyboardInterrupt  # Ctrl-C while drawing

    monkeypatch.setattr(sections, "reward_audit_section", breaks)
    with pytest.raises(KeyboardInterrupt):
        build_report([audit], ReportOptions(out=out))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the earlier report, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit", "report"]  # no partial folder left
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with pytest.raises(RunFolderError, match=r"--out .*notes holds files a report does not write \(todo.txt\)"):
        build_report([audit], ReportOptions(out=tmp_path / "notes"))
    assert (tmp_path / "notes" / "todo.txt").read_text() == "mine"


def test_a_folder_given_twice_is_reported_once(tmp_path):
    audit = write_audit(tmp_path / "audit")
    result = build_report([audit, tmp_path / "." / "audit"], ReportOptions(out=tmp_path / "report"))
    assert "a folder given more than once is reported once" in result.notes
    assert result.summary.read_text().count("| audit | reward audit |") == 1


def test_an_earlier_report_that_could_not_be_removed_does_not_stop_the_next(tmp_path, monkeypatch):
    # the earlier report set aside could not be removed (a file in it not ours to delete): the next report failed
    # with "Directory not empty" (a traceback), its finished files left in a hidden `.report.partial`
    import shutil

    from rlrm.report import build

    audit, out = write_audit(tmp_path / "audit"), tmp_path / "report"
    build_report([audit], ReportOptions(out=out))
    real = shutil.rmtree

    def keeps_earlier(path, *args, **kwargs):
        if ".earlier" not in str(path):
            real(path, *args, **kwargs)

    monkeypatch.setattr(build.shutil, "rmtree", keeps_earlier)
    build_report([audit], ReportOptions(out=out))  # leaves .report.earlier behind
    build_report([audit], ReportOptions(out=out))
    assert sorted(p.name for p in out.iterdir()) == ["reward_audit.png", "summary.md"]
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")]
