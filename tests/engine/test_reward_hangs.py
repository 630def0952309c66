"""A custom reward that never returns, or that calls sys.exit, cannot hold or silently end a run.

The trainer runs as a real subprocess: what is checked is when the process itself exits and what it says.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TINY = [
    "data.train_batch_size=4",
    "actor.mini_batch_size=4",
    "rollout.n=2",
    "data.val_size=4",
    "trainer.num_threads=1",
    "trainer.val_every=0",
    "trainer.val_before_train=false",
    "reward.kind=custom",
    "reward.max_retries=0",
]
BLOCKS = "import time\n\ndef never_returns(data_source, solution_str, ground_truth, extra_info):\n    time.sleep(600)\n"
EXITS = "import sys\n\ndef quits(data_source, solution_str, ground_truth, extra_info):\n    sys.exit(3)\n"


def _train(tmp_path: Path, source: str, name: str, timeout_s: float) -> subprocess.CompletedProcess:
    fn = tmp_path / "reward_fn.py"
    fn.write_text(source)
    sets = [*TINY, f"reward.custom.path={fn}", f"reward.custom.name={name}", "reward.timeout_s=1"]
    argv = [sys.executable, "-m", "rlrm", "train", "--profile", "tiny-rule", "--out", str(tmp_path / "run")]
    argv += ["--steps", "2", "--console", "none", *(a for s in sets for a in ("--set", s))]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    # timeout_s is the bound: half the blocking function's 600 s (a hang raises TimeoutExpired)
    return subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)


def test_a_sync_reward_that_never_returns_stops_the_run_within_its_timeout(tmp_path, tiny_policy_path):
    # before: every sample timed out after 1 s, then the process waited for the 600-s sleeps to end
    done = _train(tmp_path, BLOCKS, "never_returns", timeout_s=300)
    assert done.returncode == 1, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: step 1: 8 of 8 reward samples failed"), lines
    assert "timeouts 8" in lines[0]
    assert "reward function never_returns: no reward within reward.timeout_s=1 s" in lines[0]


def test_sys_exit_inside_a_reward_is_a_named_failure_not_a_silent_exit(tmp_path, tiny_policy_path):
    done = _train(tmp_path, EXITS, "quits", timeout_s=300)
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)  # before: exit code 3, no message
    out = done.stdout + done.stderr
    assert "reward function quits called sys.exit(3)" in out, out


@pytest.mark.parametrize("code", [None, "bye"])
def test_the_thread_runner_reports_any_exit(code):
    import asyncio

    from rlrm.engine.rewards.threads import FunctionExited, run_abandonable

    def quits():
        sys.exit(code)

    with pytest.raises(FunctionExited) as info:
        asyncio.run(run_abandonable(quits))
    assert info.value.code == code


def test_an_abandoned_call_does_not_hold_the_event_loop_or_its_shutdown():
    import asyncio
    import threading

    from rlrm.engine.rewards.threads import run_abandonable

    release = threading.Event()

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(run_abandonable(release.wait), 0.2)
        return await run_abandonable(lambda: 7)

    assert asyncio.run(main()) == 7
    # asyncio.run returned while the abandoned call still blocks (asyncio.to_thread's executor would join it)
    assert any(t.name.startswith("reward-") and t.is_alive() for t in threading.enumerate())
    release.set()
