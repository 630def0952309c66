"""Bad run setups caught before anything starts: a broken tracker install, ranks on Ray without ray, and `rlrm report`
on rows holding NaN or infinity (the cases that start processes are in tests/integration/cli/test_bad_run_setups_runs.py)."""

from __future__ import annotations

import json
import sys

from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.config.loader import dump_profile, load_profile

TRAIN = ["train", "--profile", "tiny-rule", "--console", "none"]


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


def test_a_broken_tracker_install_is_one_line_before_the_run_folder(tmp_path, monkeypatch):
    _write(tmp_path / "site" / "wandb" / "__init__.py", "raise ImportError('libfoo.so: cannot open shared object')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "wandb", raising=False)
    result = CliRunner().invoke(app, [*TRAIN, "--out", str(tmp_path / "run"), "--set", "logging.trackers=wandb"])
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines() == [
        "error: logging.trackers has wandb, but `import wandb` fails (ImportError: libfoo.so: cannot open shared "
        "object); reinstall it: pip install --force-reinstall 'rlrm[wandb]', or drop it from logging.trackers"
    ]
    assert not (tmp_path / "run").exists()


def test_ranks_on_ray_without_ray_is_one_line(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    sets = ["actor.world_size=2", "actor.ranks_on=ray"]
    result = CliRunner().invoke(app, [*TRAIN, "--out", str(tmp_path / "run"), *(a for s in sets for a in ("--set", s))])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "actor.ranks_on=ray needs the ray package: pip install 'rlrm[ray]'" in lines[0]
    assert not (tmp_path / "run").exists()
