"""A custom reward that never returns, or that calls sys.exit, cannot hold or silently end a run.

The trainer runs as a real subprocess: what is checked is when the process itself exits and what it says.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from small_run import SMALL_RUN, as_set_args

REPO = Path(__file__).resolve().parents[3]
TINY = [*SMALL_RUN, "reward.kind=custom", "reward.max_retries=0"]
# blocks 30 s, and says when each call started and whether one ever got to the end (wall-clock times, which the
# trainer's processes share); {started} and {ended} are files in the case's folder
BLOCKS_30 = (
    "import time\n\ndef never_returns(data_source, solution_str, ground_truth, extra_info):\n"
    "    with open({started!r}, 'a') as f:\n        f.write(f'{{time.time()}}\\n')\n"
    "    time.sleep(30)\n"
    "    with open({ended!r}, 'a') as f:\n        f.write('ended\\n')\n"
)
# async functions that block the event loop they run on (before: on the reward loop's own, where no timeout fires)
ASYNC_BLOCKS = {
    "sleeps": "import time\n\nasync def sleeps(data_source, solution_str, ground_truth, extra_info):\n"
    "    time.sleep(3600)\n",
    "spins": "async def spins(data_source, solution_str, ground_truth, extra_info):\n    while True:\n        pass\n",
    "awaits_forever": "import asyncio\n\nasync def awaits_forever(data_source, solution_str, ground_truth, extra_info):\n"
    "    await asyncio.sleep(1e9)\n",
}
EXITS = "import sys\n\ndef quits(data_source, solution_str, ground_truth, extra_info):\n    sys.exit(3)\n"


LEAKS = (
    "import asyncio\n\nasync def leaks(data_source, solution_str, ground_truth, extra_info):\n"
    "    asyncio.get_running_loop().create_task(asyncio.sleep(1e9))  # never awaited, never ends\n"
    "    return 1.0\n"
)
# (reward function source, the subprocess bound in s): half the blocking function's 600 s for the sync one (a hang
# raises TimeoutExpired); for the async ones 60 s, far below their 3600 s (or forever) and far above a 1-s deadline
CASES = {
    "never_returns": (BLOCKS_30, 300),
    **{name: (source, 60) for name, source in ASYNC_BLOCKS.items()},
    "leaks": (LEAKS, 60),
    "quits": (EXITS, 300),
}


def _train(folder: Path, name: str) -> subprocess.CompletedProcess:
    source, timeout_s = CASES[name]
    fn = folder / "reward_fn.py"
    if source is BLOCKS_30:
        source = source.format(started=str(folder / "started.txt"), ended=str(folder / "ended.txt"))
    fn.write_text(source)
    # a 1-s deadline for the cases about deadlines; "quits" is about sys.exit, and a loaded machine once took over
    # a second to answer one of its samples, whose timeout then was the run's "last error" instead of the exit
    deadline = 30 if name == "quits" else 1
    sets = [*TINY, f"reward.custom.path={fn}", f"reward.custom.name={name}", f"reward.attempt_timeout_s={deadline}"]
    argv = [sys.executable, "-m", "rlrm", "train", "--profile", "tiny-rule", "--out", str(folder / "run")]
    argv += ["--steps", "2", "--console", "none", *as_set_args(*sets)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
    (folder / "finished.txt").write_text(str(time.time()))  # when the process had exited (the runs overlap)
    return done


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory, tiny_policy_path):
    """{case: its finished run}: the `rlrm train` subprocess of every case the session selected in this module,
    started at once two at a time (one each took ~20 s of imports and a 1-s deadline on one core; one after the
    other they were the slowest module of the tier). Each run keeps its own bound (CASES)."""
    from concurrent.futures import ThreadPoolExecutor

    params = [getattr(item, "callspec", None) for item in request.session.items if item.module is request.module]
    selected = [p.params["name"] for p in params if p is not None and "name" in p.params]
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="reward-hang-run")
    futures = {name: pool.submit(_train, tmp_path_factory.mktemp(name), name) for name in selected}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("name", ["never_returns"])
def test_a_sync_reward_that_never_returns_stops_the_run_within_its_timeout(runs, name):
    # before: every sample timed out after 1 s, then the process waited for the sleeps to end. The bound is the
    # sleep itself, counted from the first call's start (not from the process's, which loads a model first): a
    # run that waits out the 30-s sleep fails here, however fast or slow the machine
    done = runs[name].result()
    folder = Path(done.args[done.args.index("--out") + 1]).parent
    first = min(float(t) for t in (folder / "started.txt").read_text().split())
    finished = float((folder / "finished.txt").read_text())
    assert finished - first < 30, f"the run ended {finished - first:.1f} s after the first call began its 30-s sleep"
    assert not (folder / "ended.txt").exists()  # no call ran to its end: each was stopped at its deadline
    assert done.returncode == 1, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: step 1: 8 of 8 reward samples failed"), lines
    assert "timeouts 8" in lines[0]
    assert "reward function never_returns: no reward within reward.attempt_timeout_s=1 s" in lines[0]


@pytest.mark.parametrize("name", sorted(ASYNC_BLOCKS))
def test_an_async_reward_that_blocks_its_loop_stops_the_run_within_its_timeout(runs, name):
    # before ("sleeps", "spins"): the function blocked the reward loop's event loop, no timeout fired, and the
    # run hung until the subprocess bound (the function's 3600 s, or forever)
    done = runs[name].result()
    assert done.returncode == 1, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: step 1: 8 of 8 reward samples failed"), lines
    assert "timeouts 8" in lines[0]
    assert f"reward function {name}: no reward within reward.attempt_timeout_s=1 s" in lines[0]


@pytest.mark.parametrize("name", ["leaks"])
def test_an_async_reward_that_leaks_tasks_trains_and_exits(runs, name):
    done = runs[name].result()
    assert done.returncode == 0, done.stderr
    rows = (Path(done.args[done.args.index("--out") + 1]) / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 2 and all('"reward/failures": 0' in row for row in rows), rows


@pytest.mark.parametrize("name", ["quits"])
def test_sys_exit_inside_a_reward_is_a_named_failure_not_a_silent_exit(runs, name):
    done = runs[name].result()
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


def test_the_side_loop_is_reused_and_a_blocked_one_is_given_up():
    import asyncio
    import threading
    import time

    from rlrm.engine.rewards.side_loop import SideLoop

    release = threading.Event()
    side = SideLoop("fn", grace_s=0.2)

    async def loop_id():
        return id(asyncio.get_running_loop())

    async def leaks_a_blocker():
        async def blocks():
            release.wait()  # a leaked task that blocks the loop it was left on

        asyncio.get_running_loop().create_task(blocks())
        return "never delivered"

    async def main():
        first, second = await side.call(loop_id), await side.call(loop_id)
        assert first == second != id(asyncio.get_running_loop())  # one side loop, reused; never the caller's
        started = time.perf_counter()
        with pytest.raises(asyncio.TimeoutError):  # its result would be delivered after the blocker: never
            await asyncio.wait_for(side.call(leaks_a_blocker), 0.2)
        waited_s = time.perf_counter() - started
        await asyncio.sleep(0.5)  # the health check's grace
        assert side.abandoned == 1
        assert await side.call(loop_id) != first  # a fresh loop serves the next call
        return waited_s

    try:
        waited_s = asyncio.run(main())
    finally:
        release.set()
    assert waited_s < 10 * 0.2  # the caller waited for its deadline, not for the blocked loop


def test_sys_exit_in_an_async_reward_is_reported_and_its_loop_goes_on():
    import asyncio

    from rlrm.engine.rewards.side_loop import SideLoop
    from rlrm.engine.rewards.threads import FunctionExited

    side = SideLoop("quits", grace_s=1.0)

    async def quits():
        sys.exit(3)

    async def seven():
        return 7

    async def main():
        with pytest.raises(FunctionExited) as info:
            await asyncio.wait_for(side.call(quits), 10)
        return info.value.code, await asyncio.wait_for(side.call(seven), 10)  # asyncio would re-raise SystemExit
        # out of run_forever and end the side loop's thread: the next call would then never be answered

    assert asyncio.run(main()) == (3, 7)
