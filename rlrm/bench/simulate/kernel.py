"""A small discrete-event kernel: processes are generators, time advances through a heapq.

    kernel = Kernel()
    def proc():
        yield kernel.at(kernel.now + 1.5)               # sleep until a time
        yield kernel.until(lambda: some_time_or_None)   # wait for a condition
    kernel.spawn(proc())
    kernel.run()

`until(condition)`: the condition returns the time at which what the process waits for happens
(it may lie in the future: a batch's last reward is known as soon as its generation is) or None
while it cannot be known yet. Conditions are evaluated again whenever a process has run (it may
have launched a batch, synced weights or set a version), so a time that a later event moves is
picked up: the stale wake-up is dropped by its token.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Generator
from dataclasses import dataclass


@dataclass(frozen=True)
class At:
    time: float


@dataclass(frozen=True)
class Until:
    condition: Callable[[], float | None]


class Kernel:
    """Runs generator processes in time order; see the module docstring."""

    def __init__(self):
        self.now = 0.0
        self._heap: list[tuple[float, int, int, int]] = []  # (time, seq, process id, token)
        self._procs: dict[int, Generator] = {}
        self._waiting: dict[
            int, tuple[Callable[[], float | None], float | None]
        ] = {}  # pid -> (condition, scheduled time)
        self._tokens: dict[int, int] = {}
        self._seq = itertools.count()
        self.events = 0

    @staticmethod
    def at(time: float) -> At:
        return At(time)

    @staticmethod
    def until(condition: Callable[[], float | None]) -> Until:
        return Until(condition)

    def spawn(self, proc: Generator) -> None:
        pid = len(self._procs)
        self._procs[pid] = proc
        self._tokens[pid] = 0
        self._schedule(pid, self.now)

    def run(self) -> None:
        """Until every process has returned (a process still waiting on a condition that never
        comes true is left waiting: the run ends when nothing can happen any more)."""
        while self._heap:
            time, _, pid, token = heapq.heappop(self._heap)
            if token != self._tokens.get(pid):
                continue  # superseded: its condition moved
            self.now = max(self.now, time)
            self._waiting.pop(pid, None)
            self._step(pid)
            self._recheck()

    def _step(self, pid: int) -> None:
        self.events += 1
        try:
            request = next(self._procs[pid])
        except StopIteration:
            del self._procs[pid]
            self._tokens.pop(pid, None)
            return
        if isinstance(request, At):
            self._schedule(pid, max(request.time, self.now))
        elif isinstance(request, Until):
            self._waiting[pid] = (request.condition, None)
        else:
            raise TypeError(f"a process yielded {request!r}; yield Kernel.at(t) or Kernel.until(fn)")

    def _recheck(self) -> None:
        for pid, (condition, scheduled) in list(self._waiting.items()):
            when = condition()
            if when == scheduled:
                continue
            if when is None:  # no longer known: drop the wake-up planned for the old time
                self._tokens[pid] += 1
                self._waiting[pid] = (condition, None)
                continue
            self._waiting[pid] = (condition, when)
            self._schedule(pid, max(when, self.now))

    def _schedule(self, pid: int, time: float) -> None:
        self._tokens[pid] += 1
        heapq.heappush(self._heap, (time, next(self._seq), pid, self._tokens[pid]))
