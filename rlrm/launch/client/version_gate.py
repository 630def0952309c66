"""One weight version per completion on servers whose answers carry none (vLLM).

    gate = VersionGate()
    version = await gate.enter(lambda: engine.version)   # in the event loop, before each HTTP request
    ...POST /v1/completions...; tag the answer with `version`
    gate.leave()                                         # right after, with no await in between
    with gate.reloading(timeout_s=600):                  # in the trainer's thread, around a reload
        ...POST /collective_rpc reload_weights...; engine.version = new

SGLang (and rlrm's embedded server) stamp every answer with the weight version that generated it,
so a request in flight across a reload is seen and refused. vLLM does not: a reload that lands
while a request is generating gives a completion whose first tokens come from the old weights and
its last from the new ones, under one tag. Trained on as either version, its PPO ratio and its
off-policy lag would be wrong. The gate prevents that: `reloading` closes it (a request made from
then on waits), waits until every request in flight has answered, and only then lets the reload
run; the requests that waited are sent afterwards and tagged with the new version. A request is
thus tagged with the version in force for its whole generation. The reload waits at most one
request's generation (the longest in flight).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from contextlib import contextmanager

from rlrm.errors import RolloutServerError


class VersionGate:
    """Requests in flight, counted so a weight reload runs only when none is (see the module docstring)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._in_flight = 0
        self._reloading = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def enter(self, version: Callable[[], int]) -> int:
        """Wait while a reload is under way, then count one request in flight; the version in force."""
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                if not self._reloading:
                    self._in_flight += 1
                    return version()
                opened = loop.create_future()
                self._waiters.append((loop, opened))
            await opened

    def leave(self) -> None:
        """One request answered (or failed): a reload waiting for it may start."""
        with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    @contextmanager
    def reloading(self, timeout_s: float):
        """Closed to new requests and empty of old ones for the body (a reload); reopened after, even on error.

        Called from the thread that holds the event loop, it cannot wait for requests that loop
        would answer: it refuses then if any is in flight (sync mode never has one at a reload).
        """
        with self._cond:
            if self._reloading:
                raise RolloutServerError("two weight reloads at once: the trainer must update the policy one at a time")
            self._reloading = True
            try:
                if self._in_flight and _on_loop_thread():
                    raise RolloutServerError(
                        f"weight reload asked for on the event loop's thread with {self._in_flight} rollout requests in "
                        "flight: it cannot wait for them there"
                    )
                if not self._cond.wait_for(lambda: self._in_flight == 0, timeout_s):
                    raise RolloutServerError(
                        f"weight reload waited {timeout_s:.0f} s for {self._in_flight} rollout requests in flight to "
                        "finish; raise rollout.server.request_timeout_s or lower rollout.max_new_tokens"
                    )
            except BaseException:
                self._open()
                raise
        try:
            yield
        finally:
            self._open()

    def _open(self) -> None:
        with self._cond:
            self._reloading = False
            waiters, self._waiters = self._waiters, []
        for loop, opened in waiters:
            loop.call_soon_threadsafe(_release, opened)


def _release(opened: asyncio.Future) -> None:
    if not opened.done():
        opened.set_result(None)


def _on_loop_thread() -> bool:
    """True when the caller runs an event loop (its requests could not be answered while it blocks)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
