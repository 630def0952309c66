"""An attempt's deadline (reward.attempt_timeout_s), which a wait for a worker process does not count.

    result = await within(fn(sample), timeout_s)   # AttemptTimedOut past it (a function's own TimeoutError is not one)
    with deadline_held():                            # inside it: waiting for a worker, off the clock
        worker = await take()

The reward loop (rlrm/engine/rewards/loop.py) runs each attempt under `within`; the custom functions' worker pool
(rlrm/engine/rewards/worker_pool.py) waits for a worker under `deadline_held`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sys
import time
from typing import Iterator, Protocol

from rlrm.engine.rewards.threads import FunctionCancelled, cancelled_error


class AttemptTimedOut(Exception):
    """An attempt ran past its deadline; a TimeoutError the function raised itself (a socket's, an HTTP
    client's) is not one: that is the function failing, as any other exception it raises."""

    def __init__(self, queued_s: float = 0.0):
        super().__init__()
        self.queued_s = queued_s  # how long it waited for a worker process, a wait its deadline did not count


class _Clock(Protocol):
    """What moves an attempt's deadline: asyncio.Timeout (3.11+), or _TaskTimer (3.10)."""

    def reschedule(self, when: float | None) -> None: ...

    def expired(self) -> bool: ...


class _Deadline:
    """The running attempt's deadline, which `deadline_held` stops while the attempt waits its turn for a worker."""

    def __init__(self, timeout_s: float, clock: _Clock | None = None):
        self.timeout_s, self.clock = timeout_s, clock  # clock None: the attempt is over (or not started)
        self.loop = asyncio.get_running_loop()
        self.queued_s = 0.0
        self._held_at: float | None = None

    def hold(self) -> None:
        if self.clock is not None and not self.clock.expired():  # fired already: its cancellation must stay
            self.clock.reschedule(None)
        self._held_at = time.perf_counter()

    def restart(self) -> None:
        if self._held_at is not None:
            self.queued_s += time.perf_counter() - self._held_at
            self._held_at = None
        if self.clock is not None and not self.clock.expired():
            self.clock.reschedule(asyncio.get_running_loop().time() + self.timeout_s)


_DEADLINE: contextvars.ContextVar[_Deadline | None] = contextvars.ContextVar("rlrm_attempt_deadline", default=None)


@contextlib.contextmanager
def deadline_held() -> Iterator[None]:
    """Stop the running attempt's deadline while it waits for a worker process, and start it afresh with its
    whole reward.attempt_timeout_s once the wait is over (rlrm/engine/rewards/worker_pool.py; outside an attempt,
    nothing).

    Why the wait is not on the clock: reward.attempt_timeout_s bounds the function's call. Counted from admission,
    healthy samples at the back of a 256-sample queue on 8 workers time out, are written as hung and get a
    worker killed under them. The wait is bounded all the same: workers are handed out first come, first served,
    and each call ahead is killed at its own deadline, so a sample waits at most about
    ceil(ahead / processes) deadlines (and a step as long as its whole scoring would take anyway).
    """
    deadline = _DEADLINE.get()
    # a task or another loop's call that copied the attempt's context (a side loop's) holds no deadline of its own
    if deadline is None or deadline.loop is not asyncio.get_running_loop():
        yield
        return
    deadline.hold()
    try:
        yield
    finally:
        deadline.restart()


async def within(coro, timeout_s: float):
    """`await coro`, raising AttemptTimedOut (and cancelling it) when it takes over `timeout_s`, not counting
    the time it spends in `deadline_held`.

    From Python 3.11 the coroutine runs in the calling task under `asyncio.timeout`: `asyncio.wait_for` wraps it
    in a task of its own, one more task a sample (~1.5 ms of a 256-sample tiny-rule step's scoring). On 3.10 it
    runs in a task of its own (`_within_task`), and a CancelledError of its own comes as FunctionCancelled.
    """
    if sys.version_info < (3, 11):
        return await _within_task(coro, timeout_s)
    timeout = asyncio.timeout(timeout_s)
    deadline = _Deadline(timeout_s, timeout)
    try:
        async with timeout:
            token = _DEADLINE.set(deadline)
            try:
                return await coro
            finally:
                _DEADLINE.reset(token)
                deadline.clock = None  # tasks that copied the context can outlive the attempt
    except TimeoutError:
        if timeout.expired():
            raise AttemptTimedOut(deadline.queued_s) from None
        raise


async def _within_task(coro, timeout_s: float):
    """`within` for Python 3.10, which has no asyncio.timeout (nor Task.cancelling): the coroutine in a task of its
    own, which tells apart what ended it.

    The calling task cancelled (Ctrl-C, a mode's close()): the attempt is cancelled too, its cleanup awaited (still
    under the deadline, as on 3.11) and the CancelledError goes on, also once the timer has fired: read as the
    deadline's, the run's stop was lost, and the sample retried and written as hung. The attempt's task ended
    cancelled and the caller not: the timer's (AttemptTimedOut), else the function's own CancelledError (a task it
    awaited was cancelled): FunctionCancelled, a failed sample, where a CancelledError read as the run's stop.
    """
    deadline = _Deadline(timeout_s)
    token = _DEADLINE.set(deadline)  # the task copies the context as it is now
    try:
        task = asyncio.ensure_future(coro)
    finally:
        _DEADLINE.reset(token)
    timer = deadline.clock = _TaskTimer(task)
    timer.reschedule(asyncio.get_running_loop().time() + timeout_s)
    try:
        try:
            await asyncio.wait({task})  # raises only for the calling task's own cancellation
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise
        if task.cancelled():
            if timer.expired():
                raise AttemptTimedOut(deadline.queued_s) from None
            raise FunctionCancelled(str(cancelled_error(task)))
        return task.result()
    finally:
        timer.reschedule(None)
        deadline.clock = None


class _TaskTimer:
    """Cancels `task` at a loop time that can be moved (asyncio.Timeout's part that Python 3.10 lacks)."""

    def __init__(self, task: asyncio.Future):
        self.task, self.fired = task, False
        self._handle: asyncio.TimerHandle | None = None

    def reschedule(self, when: float | None) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None if when is None else asyncio.get_running_loop().call_at(when, self._fire)

    def expired(self) -> bool:
        return self.fired

    def _fire(self) -> None:
        # a task already over is not the timer's: one that ended in a CancelledError of its own stays the function's
        self.fired = self.task.cancel()
