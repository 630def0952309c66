"""Timers for one step: `timing_s/<phase>` durations and busy intervals per component.

    timer = StepTimer()
    with timer("gen", lane="rollout"):
        ...
    timer.metrics()  # {"timing_s/gen": 0.41, ...}

Each timed block is also kept as a span (lane, name, start, end) so idle ratios and the
Chrome trace are computed from the same records.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    lane: str  # component: rollout, reward, trainer, ...
    name: str
    start_s: float  # time.perf_counter() seconds
    end_s: float
    args: dict | None = None  # extra facts shown in the trace (e.g. a reward's injected latency)


class StepTimer:
    """Accumulates phase durations and spans; one per step."""

    def __init__(self):
        self.durations: dict[str, float] = {}
        self.spans: list[Span] = []

    @contextmanager
    def __call__(self, name: str, lane: str = "trainer"):
        start = time.perf_counter()
        try:
            yield
        finally:
            end = time.perf_counter()
            self.durations[name] = self.durations.get(name, 0.0) + (end - start)
            self.spans.append(Span(lane, name, start, end))

    def span(self, lane: str, name: str, start: float, end: float, args: dict | None = None) -> None:
        """Keep a span for the trace only (no `timing_s/*`): a request, a reward call, a mini-batch."""
        self.spans.append(Span(lane, name, start, end, args))

    def add(self, name: str, lane: str, start: float, end: float) -> None:
        """Record a block timed elsewhere (e.g. a wait that ended on an event)."""
        if end > start:
            self.durations[name] = self.durations.get(name, 0.0) + (end - start)
            self.spans.append(Span(lane, name, start, end))

    def metrics(self) -> dict[str, float]:
        return {f"timing_s/{name}": seconds for name, seconds in self.durations.items()}
