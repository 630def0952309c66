"""A training run killed with kill -9 keeps what it finished: metrics rows, checkpoints and the
trace of its finished steps, and `rlrm report` works on the folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from small_run import SMALL_RUN, as_set_args
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.report.timeline import read_trace

REPO = Path(__file__).resolve().parents[3]
TINY = as_set_args(*SMALL_RUN, "trainer.save_every=2")  # --console plain below: it wins over logging.console


def _train_until_step(run: Path, step: int, timeout_s: float = 300.0) -> list[str]:
    """Start `rlrm train` in a subprocess, kill -9 it once it printed `step <step>/`; its output lines."""
    argv = [
        sys.executable,
        "-m",
        "rlrm",
        "train",
        "--profile",
        "tiny-rule",
        "--out",
        str(run),
        "--steps",
        "50",
        "--console",
        "plain",
        *TINY,
    ]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, deadline = [], time.monotonic() + timeout_s
    try:
        for line in proc.stdout:
            lines.append(line.rstrip())
            if line.startswith(f"step {step}/") or time.monotonic() > deadline:
                break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, lines
    assert lines and lines[-1].startswith(f"step {step}/"), lines
    return lines


def test_a_killed_run_keeps_the_trace_of_its_finished_steps_and_reports(tmp_path):
    run = tmp_path / "run"
    _train_until_step(run, 3)
    trace = run / "trace.json"
    assert trace.is_file()  # before, trace.json was only written at the end of a run
    events = read_trace(trace)
    updates = [e for e in events if e.get("ph") == "X" and e["name"] == "update_actor"]
    assert len(updates) >= 3  # steps 1-3 finished before the kill
    assert {e["cat"] for e in events if e.get("ph") == "X"} >= {"trainer", "generate", "reward"}

    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "timeline.png").is_file() and (out / "curve_reward.png").is_file()
    assert "unreadable" not in result.output and "no trace.json" not in result.output
