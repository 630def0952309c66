"""A sync custom reward runs in worker processes that can be stopped: a call past its deadline is killed with its
worker, a worker that dies is one failed call, and the run goes on with nothing left spinning.

Real spawned processes throughout; "gone" is checked on the pid itself (signal 0), never by name.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from pathlib import Path

import pytest

from rlrm.engine.rewards.threads import FunctionExited
from rlrm.engine.rewards.worker_pool import FunctionPool, WorkerDied

REPO = Path(__file__).resolve().parents[3]
FUNCTIONS = """
import os, signal, sys

def echo(data_source, solution_str, ground_truth, extra_info):
    return {"score": float(solution_str == ground_truth), "pid": os.getpid()}

def fails(data_source, solution_str, ground_truth, extra_info):
    raise ValueError("no answer in " + solution_str)

def quits(data_source, solution_str, ground_truth, extra_info):
    sys.exit(3)

def dies(data_source, solution_str, ground_truth, extra_info):
    os._exit(7)

def segfaults(data_source, solution_str, ground_truth, extra_info):
    os.kill(os.getpid(), signal.SIGSEGV)

def spins(data_source, solution_str, ground_truth, extra_info):
    while True:
        pass

async def async_echo(data_source, solution_str, ground_truth, extra_info):
    return 1.0

class _AsyncJudge:
    async def __call__(self, data_source, solution_str, ground_truth, extra_info):
        return {"score": 0.75, "pid": os.getpid()}

async_judge = _AsyncJudge()

def _logged(f):
    import functools

    @functools.wraps(f)
    def wrapper(*a, **k):
        return f(*a, **k)
    return wrapper

@_logged
async def decorated(data_source, solution_str, ground_truth, extra_info):
    return {"score": 0.75, "pid": os.getpid()}

def bridge(data_source, solution_str, ground_truth, extra_info):  # a sync bridge over an async judge
    import asyncio

    return asyncio.run(decorated(data_source, solution_str, ground_truth, extra_info))

def starts_a_process(data_source, solution_str, ground_truth, extra_info):
    import multiprocessing  # as verl's timeout_limit (prime_math) runs its check

    child = multiprocessing.get_context("spawn").Process(target=print)
    child.start()
    child.join()
    return 1.0
"""


@pytest.fixture()
def functions(tmp_path) -> str:
    path = tmp_path / "fns.py"
    path.write_text(FUNCTIONS)
    return str(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers signal 0: read its state
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _call(pool: FunctionPool, answer: str = "5", timeout: float = 30.0):
    return asyncio.run(asyncio.wait_for(pool.call(("d", answer, "5", {}), {}), timeout))


def test_a_call_runs_in_a_worker_and_the_worker_is_reused(functions):
    pool = FunctionPool(functions, "echo", processes=1)
    try:
        first, second = _call(pool), _call(pool, "4")
        assert first["score"] == 1.0 and second["score"] == 0.0
        assert first["pid"] == second["pid"] != os.getpid()
    finally:
        pool.close()
    assert _gone_within(first["pid"], 5)


@pytest.mark.parametrize(
    "name, error, match",
    [
        ("starts_a_process", AssertionError, "daemonic .* children; .* set reward.custom.isolation=thread$"),
        ("fails", ValueError, "no answer in 5"),
        ("quits", FunctionExited, "exit code 3"),
        ("dies", WorkerDied, "exit code 7"),
        ("segfaults", WorkerDied, "killed by signal 11"),
    ],
)
def test_what_a_function_raises_or_how_its_worker_dies_fails_that_call_only(functions, name, error, match):
    pool = FunctionPool(functions, name, processes=1)
    try:
        with pytest.raises(error, match=match):
            _call(pool)
        with pytest.raises(error, match=match):  # a fresh worker took the dead one's place
            _call(pool)
    finally:
        pool.close()
    assert pool.died == (2 if error is WorkerDied else 0)


def test_a_call_past_its_deadline_is_killed_with_its_worker_and_nothing_keeps_spinning(functions):
    pool = FunctionPool(functions, "spins", processes=2)
    threads_before = set(threading.enumerate())
    pids = []

    async def hang_once():
        task = asyncio.ensure_future(pool.call(("d", "5", "5", {}), {}))
        await asyncio.sleep(0.5)
        pids.extend(w.proc.pid for w in pool._all)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(task, 1.0)

    try:
        asyncio.run(hang_once())
        deadline_passed = time.monotonic()
        assert pids and all(_gone_within(pid, 2.0) for pid in pids), "a worker still runs 2 s after its deadline"
        assert time.monotonic() - deadline_passed < 2.0
        assert pool.killed == 1
        assert set(threading.enumerate()) <= threads_before  # no thread left in this process either
    finally:
        pool.close()


def test_async_functions_run_in_workers_too_with_isolation_process(functions):
    pool = FunctionPool(functions, "async_echo", processes=1)
    try:
        assert _call(pool) == 1.0
        assert _call(pool) == 1.0  # the worker's event loop is reused
    finally:
        pool.close()


def test_workers_exit_when_the_trainer_is_killed(functions, tmp_path):
    """SIGKILL gives the parent no chance to clean up: each worker's watchdog (the parent's pidfd) ends it."""
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.path.insert(0, {str(REPO)!r})
        from rlrm.engine.rewards.worker_pool import FunctionPool

        pool = FunctionPool({functions!r}, "spins", processes=1)

        async def main():
            task = asyncio.ensure_future(pool.call(("d", "5", "5", {{}}), {{}}))
            await asyncio.sleep(1.0)
            print(*(w.proc.pid for w in pool._all), flush=True)
            await task

        asyncio.run(main())
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(proc.stdout.readline())
        assert _alive(worker)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert _gone_within(worker, 5.0), "the worker outlived its killed parent"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_run_with_a_reward_that_hangs_on_some_samples_goes_on_and_leaves_nothing_running(tmp_path, tiny_policy_path):
    """tiny-rule with a custom reward that loops forever on 1 sample in ~5, timeout 1 s, no retries: the hung samples
    are counted as timeouts, the run finishes its steps, and no worker process is left afterwards."""
    from rlrm.config.loader import load_profile
    from rlrm.engine.metrics.metrics_file import read_metrics
    from rlrm.engine.trainer import start_run, train

    fn = tmp_path / "sometimes_hangs.py"
    fn.write_text(
        "import zlib\n\n"
        "def sometimes_hangs(data_source, solution_str, ground_truth, extra_info):\n"
        "    if zlib.crc32(solution_str.encode()) % 5 == 0:\n"
        "        while True:\n"
        "            pass\n"
        "    return float(ground_truth in solution_str)\n"
    )
    overrides = [
        "data.train_batch_size=4",
        "actor.mini_batch_size=4",
        "rollout.n=4",
        "rollout.max_new_tokens=12",
        "trainer.val_every=0",
        "trainer.val_before_train=false",
        "trainer.save_every=0",
        "trainer.num_threads=1",
        "trainer.total_steps=2",
        "logging.console=none",
        "logging.save_samples=true",
        "reward.kind=custom",
        f"reward.custom.path={fn}",
        "reward.custom.name=sometimes_hangs",
        "reward.custom.processes=2",
        "reward.attempt_timeout_s=1",
        "reward.max_retries=0",
        "reward.on_failure=default",
        "reward.max_failure_rate=1.0",
    ]
    children_before = _children()
    run = start_run(load_profile("tiny-rule", overrides), tmp_path / "run")
    result = train(run)
    assert result.last_step == 2
    rows = read_metrics(run / "metrics.jsonl")
    assert sum(r["reward/timeouts"] for r in rows) > 0  # some samples did hang, and were counted
    # each hung sample is written to the run folder: the sample, the function, how long; exactly the counted ones
    hung = [json.loads(line) for line in (run / "hung_rewards.jsonl").read_text().splitlines()]
    assert len(hung) == sum(r["reward/timeouts"] for r in rows)
    loops = [s for s in map(json.loads, (run / "samples.jsonl").read_text().splitlines()) if _loops(s["response"])]
    assert loops and all(s["score"] == 0.0 for s in loops)  # reward.default_score, never a score the function gave
    # every sample the function loops on is written; a sample that waited for a worker behind two hung ones can
    # run out of its deadline too, and is written as well
    assert {(s["step"], s["response"]) for s in loops} <= {(h["step"], h["response"]) for h in hung}
    for record in hung:
        assert record["function"] == "sometimes_hangs" and record["attempt"] == 1 and record["attempt_timeout_s"] == 1
        assert record["elapsed_s"] >= 1.0 and record["step"] in (1, 2)
        assert record["prompt"][-1]["role"] == "user" and record["ground_truth"]
    assert all(not _alive(pid) or pid in children_before for pid in _children()), "a reward worker outlived the run"
    spinning = [t.name for t in threading.enumerate() if t.name == "reward-sometimes_hangs"]  # run_abandonable's
    assert not spinning, f"threads still running the reward: {spinning}"  # on a thread, a hung call never ends


def _loops(response: str) -> bool:
    return zlib.crc32(response.encode()) % 5 == 0  # sometimes_hangs's own test


def _children() -> set[int]:
    """This process's live spawned workers (from /proc: parent pid, and `spawn_main` in the command line, which
    leaves out multiprocessing's resource tracker)."""
    me, found = os.getpid(), set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(fields[1]) == me and fields[0] != "Z" and b"spawn_main" in cmdline:
                found.add(int(entry.name))
    return found


@pytest.mark.parametrize("name", ["async_judge", "decorated", "bridge"])
def test_an_async_function_in_any_dress_runs_awaited_in_a_worker(functions, name):
    # `async def __call__`, or an async def under a sync decorator, is no coroutine function to inspect: its
    # coroutine came back unawaited ("cannot pickle 'coroutine'"); a sync bridge must still run as it is
    pool = FunctionPool(functions, name, processes=1)
    try:
        first, second = _call(pool), _call(pool)
    finally:
        pool.close()
    assert first["score"] == second["score"] == 0.75 and first["pid"] == second["pid"] != os.getpid()
