"""An attempt's deadline (rlrm/engine/rewards/loop.py `within`) stands still while the attempt waits its turn for a
worker (`deadline_held`, what FunctionPool waits in) and restarts whole when the wait ends; the run's own stop of
an attempt is never read as its deadline. Python 3.10's task-based path (`_within_task`) behaves the same, and is
run here on whatever Python runs the suite; there a CancelledError of the function's own comes as
FunctionCancelled (on 3.11 the reward loop tells it by Task.cancelling)."""

from __future__ import annotations

import asyncio

import pytest

from rlrm.engine.rewards.deadline import AttemptTimedOut, _TaskTimer, _within_task, deadline_held, within

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


async def _cleans_up_for(cleanup_s: float) -> str:
    """A call that, cancelled, takes `cleanup_s` to clean up (closes a session, waits for a server's answer)."""
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        await asyncio.sleep(cleanup_s)
        raise
    return "scored"


async def _stopped(runner, timeout_s: float, stop_after_s: float, cleanup_s: float) -> tuple[str, float]:
    """What the scoring task, stopped (Ctrl-C, a mode's close()) `stop_after_s` in, ends with, and when."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    task = asyncio.ensure_future(runner(_cleans_up_for(cleanup_s), timeout_s))
    await asyncio.sleep(stop_after_s)
    task.cancel()
    try:
        await task
    except BaseException as exc:  # noqa: BLE001 - what it ends with is the point
        return type(exc).__name__, loop.time() - started
    return "returned", loop.time() - started


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize(
    ("timeout_s", "stop_after_s"),
    [pytest.param(0.2, 0.1, id="deadline-during-the-cleanup"), pytest.param(0.1, 0.2, id="stopped-past-the-deadline")],
)
def test_the_runs_stop_is_never_read_as_the_attempts_deadline(runner, timeout_s, stop_after_s):
    # 3.10 read any CancelledError once its timer had fired as the deadline's: AttemptTimedOut, the run's stop lost
    # (the sample retried, written as hung)
    ended, _ = asyncio.run(_stopped(runner, timeout_s, stop_after_s, cleanup_s=0.3))
    assert ended == "CancelledError"


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_cleanup_after_the_runs_stop_is_still_cut_at_the_deadline(runner):
    ended, took_s = asyncio.run(_stopped(runner, 0.2, 0.05, cleanup_s=10.0))
    assert ended == "CancelledError" and 0.15 <= took_s < 2.0


async def _own_cancel(text: str | None = None):
    """A function whose own task ends cancelled (a library cancels a task it awaits) with the caller not."""
    if text is not None:
        raise asyncio.CancelledError(text)
    inner = asyncio.ensure_future(asyncio.sleep(10))
    asyncio.get_running_loop().call_later(0.01, inner.cancel)
    return await inner


def _outcome(coro) -> str:
    async def main():
        try:
            return f"returned {await coro!r}"
        except BaseException as exc:  # noqa: BLE001 - what it ends with is the point
            return f"{type(exc).__name__}: {exc}"

    return asyncio.run(main())


def test_py310_a_functions_own_cancelled_error_is_function_cancelled_not_the_runs_stop():
    # as a CancelledError it escaped RewardLoop.score on 3.10: sync read it as Ctrl-C, the overlapping modes waited
    assert _outcome(_within_task(_own_cancel(), 5.0)) == "FunctionCancelled: "
    assert _outcome(_within_task(_own_cancel("the client closed"), 5.0)) == "FunctionCancelled: the client closed"
    # past its deadline it is the deadline's, whatever the function does with the cancellation
    assert _outcome(_within_task(_cleans_up_for(0.0), 0.05)) == "AttemptTimedOut: "


def test_py310_a_timer_that_fires_on_a_call_already_over_is_not_its_deadline():
    # the function's own cancel ends its task, and the timer fires before the attempt reads how it ended
    async def main():
        task = asyncio.ensure_future(_own_cancel("over"))
        await asyncio.wait({task})
        timer = _TaskTimer(task)
        timer._fire()
        return timer.expired()

    assert asyncio.run(main()) is False
