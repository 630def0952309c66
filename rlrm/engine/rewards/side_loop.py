"""A user's async function run on an event loop of its own, in a daemon thread, so that a function that blocks
its loop cannot hold the run.

    side = SideLoop("compute_score", grace_s=cfg.attempt_timeout_s)
    result = await side.call(fn, *args, **kwargs)   # under a deadline: a timeout abandons the call

Why not await the function on the caller's loop: an `async def` that calls `time.sleep(600)`, or loops without
an `await`, blocks the loop it runs on, and then no timeout on that loop can fire; the whole run hangs. Here the
function runs on a second loop (one thread, reused across calls, so a function that keeps an aiohttp session or
other loop-bound state between calls keeps working), and the caller's loop only waits for the result, with its
deadline. The caller's loop stays free, so the reward forwarder that serves `reward_router_address`
(rlrm/engine/rewards/model_proxy.py) still answers the function's calls.

On a timeout the call is cancelled on the side loop, and the loop is suspect: a call sent to a loop that a
function blocks would wait there for nothing, so until the loop answers a no-op (a new call waits SETTLE_S for
that), each new call (retries included) runs on a stand-in loop of its own, which stops when its call ends. A healthy loop (the function awaits something
that never ends) runs the cancellation, answers at once and serves again. A blocked loop does not answer within
`grace_s` and is abandoned, like run_abandonable's threads (rlrm/engine/rewards/threads.py): later calls get a
fresh loop, the old thread is left to finish (or not) on its own, and the process exits without it. One sample
whose function blocks its loop so fails that sample, and the calls already running beside it on that loop.
Tasks a function leaves behind (un-awaited `create_task`) run on a side loop, never on the caller's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Callable

from rlrm.engine.rewards.threads import FunctionCancelled, FunctionExited

# how long a call waits for the check of a suspect home loop before it takes a stand-in: a loop the function only
# awaited something on answers within a turn, keeping its loop-bound state (a session); a blocked one never does
SETTLE_S = 0.1


class SideLoop:
    """Event loops in daemon threads for a user's async function: one its calls share, and a stand-in for each call
    made while that one is suspect (a call on it timed out, and it has not answered a no-op yet)."""

    def __init__(self, name: str, grace_s: float, kind: str = "reward"):
        self.name, self.grace_s, self.kind = name, grace_s, kind
        self.abandoned = 0  # loops given up for blocked (counted so that tests and logs can tell)
        self._home: _Loop | None = None  # where calls go while it is not suspect
        self._suspects: set[_Loop] = set()  # loops with a health check in flight
        self._checks_of: dict[_Loop, asyncio.Task] = {}  # health checks in flight (held so they are not collected)

    async def call(self, fn: Callable, *args, **kwargs) -> Any:
        """`await fn(*args, **kwargs)` on a side loop; its result, or what it raised."""
        check = self._checks_of.get(self._home) if self._home is not None else None
        if check is not None:  # a healthy home loop answers its check at once: wait for that, briefly
            await asyncio.wait({check}, timeout=min(self.grace_s, SETTLE_S))
        side = self._pick()
        side.calls += 1
        sent: list[concurrent.futures.Future] = []  # the call's future, for _guarded to see the caller's cancel
        future = asyncio.run_coroutine_threadsafe(_guarded(fn, args, kwargs, sent), side.loop)
        sent.append(future)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:  # the caller's deadline: the call is cancelled there (if it can be)
            future.cancel()
            self._suspect(side)
            raise
        finally:
            side.calls -= 1
            self._stop_if_spare(side)

    def _pick(self) -> _Loop:
        if self._home is None:
            self._home = _Loop(f"{self.kind}-{self.name}-loop")
        if self._home in self._suspects:
            # a function that blocked the home loop would block every call sent there, retries included: until it
            # answers, each call gets a loop of its own, which stops when the call ends
            return _Loop(f"{self.kind}-{self.name}-stand-in")
        return self._home

    def _suspect(self, side: _Loop) -> None:
        """Check the loop a call timed out on (once at a time); the home loop takes no calls meanwhile."""
        if side in self._suspects or side.abandoned:
            return
        self._suspects.add(side)
        check = asyncio.get_running_loop().create_task(self._check(side))
        self._checks_of[side] = check
        check.add_done_callback(lambda _: self._checks_of.pop(side, None))

    async def _check(self, side: _Loop) -> None:
        """Give the loop up when a no-op sent to it is not run within grace_s (a function blocks it); a loop
        that answers serves again (the home loop: the calls of a function that keeps loop-bound state)."""
        # a plain callback, no coroutine: a loop stopped with it still queued leaves no coroutine never awaited. It
        # hops once on the loop, so it queues behind the cancelled call's own step (its cleanup): sent straight, it
        # was answered before that step ran, and a loop about to block on a cleanup passed for healthy
        pong: concurrent.futures.Future = concurrent.futures.Future()
        side.loop.call_soon_threadsafe(lambda: side.loop.call_soon(_answer, pong))
        try:
            await asyncio.wait_for(asyncio.wrap_future(pong), self.grace_s)
        except asyncio.TimeoutError:
            side.abandoned = True  # its thread is left to finish (or not) on its own
            self.abandoned += 1
            if side is self._home:
                self._home = None  # the next call starts a fresh one
            return
        finally:  # cancelled too (the caller's loop shuts down): undecided, left running as a daemon thread
            self._suspects.discard(side)
        self._stop_if_spare(side)  # it answered: a stand-in with no call left stops

    def _stop_if_spare(self, side: _Loop) -> None:
        if side is not self._home and side.calls == 0 and side not in self._suspects and not side.abandoned:
            side.stop()


class _Loop:
    """One event loop running in a daemon thread of its own, and the calls in flight on it."""

    def __init__(self, thread_name: str):
        self.calls = 0
        self.abandoned = False
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.loop.call_soon(started.set)
        threading.Thread(target=self._run, name=thread_name, daemon=True).start()
        started.wait()

    def _run(self) -> None:
        self.loop.run_forever()
        self.loop.close()  # stopped: nothing will run on it again

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


def _answer(pong: concurrent.futures.Future) -> None:
    try:
        pong.set_result(None)
    except concurrent.futures.InvalidStateError:  # the check gave up (or was cancelled) first
        pass


async def _guarded(fn: Callable, args: tuple, kwargs: dict, sent: list[concurrent.futures.Future]) -> Any:
    # SystemExit or KeyboardInterrupt raised in a task would stop the side loop itself (asyncio re-raises
    # them out of run_forever): they come back as FunctionExited, a failed sample, instead. A CancelledError the
    # function raised (a task it awaited was cancelled), not the caller's cancel, comes back as an error too: it
    # would read as the caller's deadline on the caller's side, and the healthy loop be suspected
    try:
        return await fn(*args, **kwargs)
    except (SystemExit, KeyboardInterrupt) as exc:
        raise FunctionExited(exc.code if isinstance(exc, SystemExit) else "KeyboardInterrupt") from None
    except asyncio.CancelledError as exc:
        # the caller's cancel (its deadline, the run's stop) cancels the call's future before it reaches this task:
        # that tells the two apart on any Python (being_cancelled cannot before 3.11)
        if any(future.cancelled() for future in sent):
            raise
        raise FunctionCancelled(
            f"CancelledError raised in {getattr(fn, '__name__', 'the function')}: {exc!r}"
        ) from None
