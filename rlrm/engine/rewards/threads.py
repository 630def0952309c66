"""A user's sync function run on a thread of its own that nobody waits for, so a call that never returns
cannot hold the run.

    result = await run_abandonable(fn, *args, **kwargs)   # under asyncio.wait_for: a timeout abandons the call

`asyncio.to_thread` runs on the loop's default executor, whose threads `asyncio.run` and the interpreter
join at exit: one `time.sleep(600)` in a reward then holds the stopped run for ten minutes after its error.
Here each call gets a daemon thread: on a timeout the caller moves on at once, the thread is left to finish
(or not) on its own, and the process exits without it. A `sys.exit()` or KeyboardInterrupt raised inside the
function comes back as FunctionExited instead of ending the trainer without a word.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any, Callable


class FunctionExited(Exception):
    """The function raised SystemExit or KeyboardInterrupt (`code`: the exit code it asked for)."""

    def __init__(self, code: Any):
        super().__init__(f"exit code {code}")
        self.code = code


async def run_abandonable(fn: Callable, *args, **kwargs):
    """`fn(*args, **kwargs)` on a new daemon thread; its result, or what it raised."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(value, error) -> None:
        if future.done():  # the caller gave up on it (a timeout cancelled the await)
            return
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)

    def target() -> None:
        value = None
        error: BaseException | None = None
        try:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):  # an async function that looked like a plain one: run it here
                value = asyncio.run(_awaited(value))
        except (SystemExit, KeyboardInterrupt) as exc:
            error = FunctionExited(exc.code if isinstance(exc, SystemExit) else "KeyboardInterrupt")
        except BaseException as exc:  # noqa: BLE001 - handed to the caller as it was
            error = exc
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the loop is closed: the run ended while this call was abandoned
            pass

    threading.Thread(target=target, name=f"reward-{getattr(fn, '__name__', 'fn')}", daemon=True).start()
    return await future


class FunctionCancelled(Exception):
    """A user's function ended in a CancelledError of its own (a task it awaited was cancelled: an HTTP client's, a
    gather's), not its caller's cancellation: a failed call. As a CancelledError it would read as the run's own
    (Ctrl-C, a mode's close()) or as a deadline's."""


def being_cancelled() -> bool:
    """Whether the running task has a cancellation pending: its own, not a CancelledError raised by something it
    awaited (Python 3.11's `Task.cancelling`; before it, every CancelledError reads as the task's own, and the two
    are told apart where the function runs in a task of its own: rlrm/engine/rewards/deadline.py `_within_task`,
    the side loop's call (rlrm/engine/rewards/side_loop.py), rlrm/engine/agent/tools.py `_wait_for_task`)."""
    cancelling = getattr(asyncio.current_task(), "cancelling", None)
    return bool(cancelling()) if cancelling is not None else True


def cancelled_error(task: asyncio.Future) -> asyncio.CancelledError:
    """The CancelledError a cancelled `task` ended in, with the text its coroutine raised it with where Python
    keeps that (3.10 chains the raised one under a bare one)."""
    try:
        task.result()
    except asyncio.CancelledError as exc:
        raised = exc.__context__
        return raised if isinstance(raised, asyncio.CancelledError) else exc
    raise ValueError("the task was not cancelled")


async def _awaited(value):
    return await value
