"""Calls waiting for a free worker process (rlrm/engine/rewards/worker_pool.py): the wait is not on the attempt's
deadline, a worker handed to a waiter that gives up goes on to the next one, closing the pool wakes the waiters,
and a worker that died while idle is replaced before a call is sent to it.

Real spawned workers throughout; each test takes a few seconds.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards import worker_pool
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.custom import make_custom_reward
from rlrm.engine.rewards.loop import RewardLoop
from rlrm.engine.rewards.worker_pool import FunctionPool

FUNCTIONS = """
import time

def slow(x):
    time.sleep(x)
    return x

def verifier(data_source, solution_str, ground_truth, extra_info):
    time.sleep(0.3)  # always answers, in 0.3 s
    return float(solution_str.strip().endswith(ground_truth))
"""


@pytest.fixture()
def functions(tmp_path) -> str:
    path = tmp_path / "fns.py"
    path.write_text(FUNCTIONS)
    return str(path)


def _sample(i: int) -> RewardSample:
    return RewardSample(f"p{i}", i, "d", [{"role": "user", "content": "q"}], "#### 3", "3")


def test_samples_waiting_for_a_worker_are_not_timed_out_or_written_as_hung(functions):
    cfg = RewardConfig(
        kind="custom",
        custom={"path": functions, "name": "verifier", "processes": 1, "isolation": "process"},
        attempt_timeout_s=2.0,
        max_retries=0,
        on_failure="default",
    )
    fn = make_custom_reward(cfg)
    loop = RewardLoop(fn, cfg)

    async def main():
        await loop.score(_sample(0))  # the worker started and warm: every call now takes 0.3 s
        loop.take_metrics(), loop.take_hung()
        return await loop.score_all([_sample(i) for i in range(12)])

    try:
        results = asyncio.run(main())
    finally:
        fn.close()
    metrics, hung = loop.take_metrics(), loop.take_hung()
    # 12 calls x 0.3 s on one worker: the last waits ~3.3 s for its turn, past the 2 s deadline; none runs over 0.3 s
    assert [r.score for r in results] == [1.0] * 12
    assert (metrics["reward/timeouts"], metrics["reward/failures"], hung) == (0, 0, [])
    assert fn.pool.killed == 0


def test_a_call_that_waited_then_hung_is_recorded_with_its_wait_apart(functions):
    cfg = RewardConfig(
        kind="custom",
        custom={"path": functions, "name": "verifier", "processes": 1, "isolation": "process"},
        attempt_timeout_s=0.2,  # under the function's 0.3 s: every call hangs by this deadline
        max_retries=0,
        on_failure="default",
    )
    fn = make_custom_reward(cfg)
    loop = RewardLoop(fn, cfg)
    try:
        asyncio.run(loop.score_all([_sample(i) for i in range(2)]))
    finally:
        fn.close()
    hung = sorted(loop.take_hung(), key=lambda h: h["queued_s"])
    assert len(hung) == 2 and fn.pool.killed == 2
    # the first ran at once; the second waited for the first's worker to be killed, then ran its own 0.2 s
    assert hung[0]["queued_s"] < 0.1 and hung[1]["queued_s"] >= 0.15
    assert all(0.2 <= h["elapsed_s"] < 1.0 for h in hung)


def test_a_waiter_cancelled_as_it_is_handed_a_worker_passes_it_to_the_next(functions, monkeypatch):
    pool = FunctionPool(functions, "slow", processes=1)
    hand_over = worker_pool._hand_over
    tasks: dict[str, asyncio.Task] = {}

    def hand_over_then_deadline(waiter, worker, p):
        hand_over(waiter, worker, p)
        # B's deadline fires in the same loop turn as A's worker is handed to it (asyncio.timeout: task.cancel())
        if not tasks["b"].done():
            tasks["b"].cancel()

    monkeypatch.setattr(worker_pool, "_hand_over", hand_over_then_deadline)

    async def main():
        await pool.call((0.0,), {})  # the one worker started
        tasks["a"] = asyncio.create_task(pool.call((0.5,), {}))
        await asyncio.sleep(0.05)
        tasks["b"] = asyncio.create_task(pool.call((0.0,), {}))
        await asyncio.sleep(0.05)
        c = asyncio.create_task(pool.call((0.0,), {}))
        await tasks["a"]
        started = time.perf_counter()
        return await asyncio.wait_for(c, 3.0), time.perf_counter() - started

    try:
        value, waited_s = asyncio.run(main())
    finally:
        pool.close()
    assert value == 0.0 and waited_s < 1.0  # C got the worker B gave up, not its own deadline


def test_closing_the_pool_wakes_the_calls_waiting_for_a_worker(functions):
    pool = FunctionPool(functions, "slow", processes=1)

    async def main():
        running = asyncio.create_task(pool.call((30.0,), {}))
        await asyncio.sleep(0.3)
        waiting = asyncio.create_task(pool.call((0.0,), {}))
        await asyncio.sleep(0.05)
        pool.close()
        with pytest.raises(RuntimeError, match="worker pool of slow is closed"):
            await asyncio.wait_for(waiting, 3.0)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)

    asyncio.run(main())


def test_a_worker_killed_while_idle_is_replaced_before_the_next_call(functions):
    pool = FunctionPool(functions, "slow", processes=1)

    async def main():
        await pool.call((0.0,), {})
        (worker,) = pool._all
        os.kill(worker.proc.pid, signal.SIGKILL)  # as the OOM killer would, between two calls
        worker.proc.join(timeout=5)
        return await asyncio.wait_for(pool.call((0.0,), {}), 30.0)

    try:
        assert asyncio.run(main()) == 0.0  # not WorkerDied for an innocent sample
    finally:
        pool.close()
    assert pool.died == 0


def test_a_waiter_whose_replacement_worker_cannot_start_gets_the_error(functions, monkeypatch):
    # a call given up (its worker killed) hands its place to the next waiter by starting a fresh worker; when the
    # system refused that process (a pids limit, `ulimit -n` reached) the waiter was already taken off the queue and
    # waited for ever, its deadline held: the step hung
    pool = FunctionPool(functions, "slow", processes=1)

    async def main():
        assert await pool.call((0.0,), {}) == 0.0  # the one worker, up
        first = asyncio.ensure_future(pool.call((30.0,), {}))
        await asyncio.sleep(0.3)
        queued = asyncio.ensure_future(pool.call((0.0,), {}))
        await asyncio.sleep(0.3)

        def refused(*args):
            raise OSError(11, "Resource temporarily unavailable")  # fork's EAGAIN under a pids limit

        monkeypatch.setattr(worker_pool, "_Worker", refused)
        first.cancel()  # the reward loop's timeout
        with pytest.raises(asyncio.CancelledError):
            await first
        with pytest.raises(RuntimeError, match=r"cannot start a worker process for slow: .*ulimit -u"):
            await asyncio.wait_for(queued, 20)

    try:
        asyncio.run(main())
    finally:
        pool.close()
