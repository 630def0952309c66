"""An attempt's deadline (rlrm/engine/rewards/loop.py `within`) stands still while the attempt waits its turn for a
worker (`deadline_held`, what FunctionPool waits in) and restarts whole when the wait ends; Python 3.10's
task-based path (`_within_task`) behaves the same, and is run here on whatever Python runs the suite."""

from __future__ import annotations

import asyncio

import pytest

from rlrm.engine.rewards.deadline import AttemptTimedOut, _within_task, deadline_held, within

RUNNERS = [pytest.param(within, id="within"), pytest.param(_within_task, id="py310-task")]


async def _queued_then_runs(queued_s: float, runs_s: float) -> str:
    with deadline_held():  # a FunctionPool waiter: no worker free yet
        await asyncio.sleep(queued_s)
    await asyncio.sleep(runs_s)  # the call in its worker
    return "scored"


@pytest.mark.parametrize("runner", RUNNERS)
def test_the_wait_for_a_worker_is_off_the_clock(runner):
    # 0.3 s queued + 0.05 s running under a 0.2 s deadline: only the 0.05 s counts
    assert asyncio.run(runner(_queued_then_runs(0.3, 0.05), 0.2)) == "scored"


@pytest.mark.parametrize("runner", RUNNERS)
def test_the_deadline_restarts_whole_after_the_wait_and_still_cuts_a_hung_call(runner):
    async def main():
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(AttemptTimedOut) as info:
            await runner(_queued_then_runs(0.1, 10.0), 0.2)
        return loop.time() - started, info.value.queued_s

    total_s, queued_s = asyncio.run(main())
    assert 0.1 <= queued_s < 0.2
    assert 0.3 <= total_s < 1.0  # 0.1 s queued, then the whole 0.2 s deadline


def test_outside_an_attempt_holding_does_nothing():
    async def main():
        with deadline_held():
            await asyncio.sleep(0)
        return "ok"

    assert asyncio.run(main()) == "ok"
