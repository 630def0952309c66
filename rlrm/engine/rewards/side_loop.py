"""A user's async function run on an event loop of its own, in a daemon thread, so that a function that blocks
its loop cannot hold the run.

    side = SideLoop("compute_score", grace_s=cfg.attempt_timeout_s)
    result = await side.call(fn, *args, **kwargs)   # under asyncio.wait_for: a timeout abandons the call

Why not await the function on the caller's loop: an `async def` that calls `time.sleep(600)`, or loops without
an `await`, blocks the loop it runs on, and then no timeout on that loop can fire; the whole run hangs. Here the
function runs on a second loop (one thread, reused across calls, so a function that keeps an aiohttp session or
other loop-bound state between calls keeps working), and the caller's loop only waits for the result, with its
deadline. The caller's loop stays free, so the reward forwarder that serves `reward_router_address`
(rlrm/engine/rewards/model_proxy.py) still answers the function's calls.

On a timeout the call is cancelled on the side loop. A healthy loop (the function awaits something that never
ends) runs the cancellation and goes on serving. A blocked loop cannot: a no-op sent to it gets no answer within
`grace_s`, and the loop is then abandoned, like run_abandonable's threads (rlrm/engine/rewards/threads.py): later
calls get a fresh loop, the old thread is left to finish (or not) on its own, and the process exits without it.
Tasks a function leaves behind (un-awaited `create_task`) run on the side loop, never on the caller's.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable

from rlrm.engine.rewards.threads import FunctionExited


class SideLoop:
    """One event loop in a daemon thread for a user's async function, replaced when a call blocks it."""

    def __init__(self, name: str, grace_s: float, kind: str = "reward"):
        self.name, self.grace_s, self.kind = name, grace_s, kind
        self.abandoned = 0  # loops given up for blocked (counted so that tests and logs can tell)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._checks: set[asyncio.Task] = set()  # health checks in flight (held so they are not collected)

    async def call(self, fn: Callable, *args, **kwargs) -> Any:
        """`await fn(*args, **kwargs)` on the side loop; its result, or what it raised."""
        loop = self._running_loop()
        future = asyncio.run_coroutine_threadsafe(_guarded(fn, args, kwargs), loop)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:  # the caller's deadline: the call is cancelled there (if it can be)
            future.cancel()
            check = asyncio.get_running_loop().create_task(self._abandon_if_blocked(loop))
            self._checks.add(check)
            check.add_done_callback(self._checks.discard)
            raise

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            started = threading.Event()
            loop.call_soon(started.set)
            thread = threading.Thread(target=loop.run_forever, name=f"{self.kind}-{self.name}-loop", daemon=True)
            thread.start()
            started.wait()
            self._loop = loop
        return self._loop

    async def _abandon_if_blocked(self, loop: asyncio.AbstractEventLoop) -> None:
        """Give the loop up when a no-op sent to it is not run within grace_s (a function blocks it)."""
        if loop is not self._loop:
            return
        ping = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop)
        try:
            await asyncio.wait_for(asyncio.wrap_future(ping), self.grace_s)
        except asyncio.TimeoutError:
            if loop is self._loop:  # several calls on it timed out together: give it up once
                self._loop = None
                self.abandoned += 1


async def _guarded(fn: Callable, args: tuple, kwargs: dict) -> Any:
    # SystemExit or KeyboardInterrupt raised in a task would stop the side loop itself (asyncio re-raises
    # them out of run_forever): they come back as FunctionExited, a failed sample, instead
    try:
        return await fn(*args, **kwargs)
    except (SystemExit, KeyboardInterrupt) as exc:
        raise FunctionExited(exc.code if isinstance(exc, SystemExit) else "KeyboardInterrupt") from None
