"""Timers for one step: `timing_s/<phase>` durations and busy intervals per component.

    timer = StepTimer()
    with timer("gen", lane="rollout"):
        ...
    timer.metrics()  # {"timing_s/gen": 0.41, ...}

Each timed block is also kept as a span (lane, name, start, end) so idle ratios and the
Chrome trace are computed from the same records.

With `measure_cpu` (sync mode, where no phase overlaps another) a block timed with `cpu=True` also
records `cpu_s/<phase>`: the process's CPU seconds, all threads, while it ran. Divided by its
`timing_s/<phase>` it says how many cores the phase kept busy; `rlrm bench simulate` reads it to
predict how generation and training slow each other down when another mode overlaps them.
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

    def __init__(self, measure_cpu: bool = False):
        self.durations: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.spans: list[Span] = []
        self.measure_cpu = measure_cpu

    @contextmanager
    def __call__(self, name: str, lane: str = "trainer", cpu: bool = False):
        cpu = cpu and self.measure_cpu
        start, cpu_start = time.perf_counter(), time.process_time() if cpu else 0.0
        try:
            yield
        finally:
            end = time.perf_counter()
            self.durations[name] = self.durations.get(name, 0.0) + (end - start)
            self.spans.append(Span(lane, name, start, end))
            if cpu:
                self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - cpu_start

    def span(self, lane: str, name: str, start: float, end: float, args: dict | None = None) -> None:
        """Keep a span for the trace only (no `timing_s/*`): a request, a reward call, a mini-batch."""
        self.spans.append(Span(lane, name, start, end, args))

    def add(self, name: str, lane: str, start: float, end: float) -> None:
        """Record a block timed elsewhere (e.g. a wait that ended on an event)."""
        if end > start:
            self.durations[name] = self.durations.get(name, 0.0) + (end - start)
            self.spans.append(Span(lane, name, start, end))

    @contextmanager
    def cpu_time(self, name: str):
        """Record `cpu_s/<name>` for a block whose wall time is recorded elsewhere (e.g. per mini-batch)."""
        start = time.process_time() if self.measure_cpu else 0.0
        try:
            yield
        finally:
            if self.measure_cpu:
                self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - start

    def metrics(self) -> dict[str, float]:
        return {
            **{f"timing_s/{name}": seconds for name, seconds in self.durations.items()},
            **{f"cpu_s/{name}": seconds for name, seconds in self.cpu.items()},
        }
