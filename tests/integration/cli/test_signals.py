"""`rlrm train` stopped by a signal, as a real process: SIGTERM (schedulers, `docker stop`, `kill`) is handled as
Ctrl-C is (the last completed step checkpointed, trace.json whole, exit 143 and the --resume line), and a run
interrupted before its first step says there is nothing to resume and leaves no folder behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from small_run import SMALL_RUN, as_set_args

from rlrm.engine.checkpoint import list_checkpoints
from rlrm.engine.metrics.metrics_file import read_metrics

REPO = Path(__file__).resolve().parents[3]


def _start(out: Path, *settings: str, sigint_ignored: bool = False, own_group: bool = False) -> subprocess.Popen:
    argv = [sys.executable, "-m", "rlrm", "train", "--profile", "tiny-rule", *as_set_args(*SMALL_RUN, *settings)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    # `rlrm train ... &` in a batch script: the shell starts it with SIGINT ignored, so Python takes no Ctrl-C
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
    return subprocess.Popen(
        argv + ["--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ignore,
        start_new_session=own_group,  # a shell job's process group: Ctrl-C at the terminal reaches all of it
    )


def _wait_for(condition, proc: subprocess.Popen, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run did not get there in time"
        time.sleep(0.05)


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["interactive", "started-with-&"])
def test_sigterm_checkpoints_the_last_completed_step_and_says_how_to_resume(tmp_path, sigint_ignored):
    out = tmp_path / "run"
    proc = _start(out, "trainer.total_steps=500", sigint_ignored=sigint_ignored)
    metrics = out / "metrics.jsonl"
    _wait_for(lambda: metrics.is_file() and len(read_metrics(metrics)) >= 2, proc)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr[-2000:]
    last = read_metrics(out / "metrics.jsonl")[-1]["step"]
    assert stdout.strip().splitlines()[-1] == (
        f"interrupted (SIGTERM): checkpoint saved at step {last}; continue with: rlrm train --resume {out}"
    )
    assert [p.name for p in list_checkpoints(out)] == [f"step_{last}"]  # save_every=0: the interrupt's own
    trace = json.loads((out / "trace.json").read_text())  # whole, not cut where the process died
    assert {e["name"] for e in trace["traceEvents"]} >= {"gen", "update_actor"}


def test_an_interrupt_before_the_first_step_leaves_nothing_to_resume_and_no_folder(tmp_path):
    out = tmp_path / "run"
    proc = _start(out, "trainer.total_steps=500")
    _wait_for(lambda: (out / "config.yaml").is_file(), proc)  # started: the model loads, nothing trained yet
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert stdout.strip().splitlines()[-1] == (
        f"interrupted (SIGINT) before the first step finished: nothing to resume, and the run folder {out} is "
        "removed; start again with the same command"
    )
    assert not out.exists()


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "scancel"])
def test_a_signal_to_the_whole_group_of_a_two_rank_run_checkpoints_the_last_step(tmp_path, stop):
    # the terminal sends SIGINT to the whole group, actor ranks included, and SLURM's scancel, `timeout` and
    # `kill -TERM -PGID` send SIGTERM so: the ranks died of it, and the trainer's interrupt save, which asks the ranks
    # for their state, failed ("trains from step 0", or "its last checkpoint is intact" with none written)
    out = tmp_path / "run"
    ranks = ("actor.world_size=2", "actor.mini_batch_size=2", "reward.inject.latency=fixed:2")
    proc = _start(out, "trainer.total_steps=500", *ranks, own_group=True)
    try:
        metrics = out / "metrics.jsonl"
        _wait_for(lambda: metrics.is_file() and len(read_metrics(metrics)) >= 2, proc)
        time.sleep(0.8)  # the next step waits 2 s for its rewards: the ranks are idle
        os.killpg(proc.pid, stop)  # to every process of the group
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    last = read_metrics(out / "metrics.jsonl")[-1]["step"]
    assert proc.returncode == 128 + stop and "RankError" not in stderr, stderr[-2000:]
    assert stdout.strip().splitlines()[-1].startswith(f"interrupted ({stop.name}): checkpoint saved at step {last};")
    assert [p.name for p in list_checkpoints(out)] == [f"step_{last}"]


@pytest.mark.parametrize(("mode", "stop"), [("fully-async", signal.SIGINT), ("fully-async", signal.SIGTERM),
                                            ("one-step-off", signal.SIGINT)])  # fmt: skip
def test_one_signal_stops_an_overlapping_mode_at_a_step_boundary(tmp_path, mode, stop):
    # the trainer thread's work absorbed the interrupt and re-armed it for the next await, which in a step whose
    # every await is that work (fully-async with its groups scored ahead) was more of it: the run trained on
    out = tmp_path / "run"
    proc = _start(out, f"trainer.mode={mode}", "trainer.total_steps=100000")
    metrics = out / "metrics.jsonl"
    _wait_for(lambda: metrics.is_file() and len(read_metrics(metrics)) >= 3, proc)
    proc.send_signal(stop)
    try:
        _, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()  # by its own pid
        proc.communicate()
        raise AssertionError(f"{mode} still trained 60 s after one {stop.name}") from None
    assert proc.returncode == 128 + stop, stderr[-2000:]
    last = read_metrics(metrics)[-1]["step"]
    assert [p.name for p in list_checkpoints(out)] == [f"step_{last}"]  # the last step logged, whole


def test_sigterm_as_the_run_folder_is_made_stops_as_ctrl_c_does(tmp_path, monkeypatch):
    # between start_run and the run's loop SIGTERM had Python's default: the process ended with no line and left
    # config.yaml and .run.lock, so the same command then refused the folder ("already holds files of another run")
    from typer.testing import CliRunner

    import rlrm.engine.run_folder as run_folder
    from rlrm.cli.main import app

    real = run_folder.start_run

    def then_sigterm(*args, **kwargs):
        made = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's, as the folder appears
        return made

    monkeypatch.setattr(run_folder, "start_run", then_sigterm)

    def default(*_):  # stands for Python's default, which would end this test process
        raise AssertionError("SIGTERM met no handler of rlrm's: the process would have ended, the folder left")

    out = tmp_path / "run"
    before = signal.signal(signal.SIGTERM, default)
    try:
        result = CliRunner().invoke(app, ["train", "--profile", "tiny-rule", "--console", "none", "--out", str(out)])
        handler = signal.getsignal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert result.exit_code == 143, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"interrupted (SIGTERM) before the first step finished: nothing to resume, and the run folder {out} is "
        "removed; start again with the same command"
    )
    assert not out.exists() and handler is default  # the handler given back
