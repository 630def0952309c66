"""`rlrm report` reads metrics rows that hold NaN or infinity (the run-setup cases that start processes are in tests/integration/cli/test_bad_run_setups.py)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.config.loader import dump_profile, load_profile


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path


def test_report_reads_rows_holding_nan_or_infinity(tmp_path):
    run = tmp_path / "run"
    _write(run / "config.yaml", dump_profile(load_profile("tiny-rule")))
    rows = [{"step": s, "critic/score/mean": v, "perf/throughput": 10.0 * s} for s, v in [(1, 0.5), (2, float("nan"))]]
    rows.append({"step": 3, "critic/score/mean": float("inf"), "perf/throughput": 30.0})
    _write(run / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows))  # json writes NaN and Infinity
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output  # before: "nothing to report: no complete rows"
    assert "holds 2 NaN or infinite value(s), drawn as gaps" in result.output
