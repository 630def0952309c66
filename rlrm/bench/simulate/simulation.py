"""One simulated training run of one mode: the kernel, the engines, the reward loop and the two processes.

draws = draw_workload(spec)
run = simulate(spec, "one-step-off", draws)
run.rows          # one metrics.jsonl row per step (perf/*, timing_s/*, idle/*, async/*, reward/*)
run.spans         # trace.json spans (rlrm.engine.metrics.timing.Span)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from rlrm.bench.simulate.batches import RewardQueue
from rlrm.bench.simulate.engines import ContinuousEngine
from rlrm.bench.simulate.kernel import Kernel
from rlrm.bench.simulate.modes import StopRun, rollouter, trainer
from rlrm.bench.simulate.record import Recorder
from rlrm.bench.simulate.static import StaticEngine


@dataclass
class SimRun:
    mode: str
    rows: list[dict]
    spans: list = field(default_factory=list)
    stopped: str | None = None  # why the run stopped early (reward.on_failure = fail)
    events: int = 0


class Simulation:
    """The shared state the rollouter and trainer processes read and write (see modes.py)."""

    def __init__(self, spec, mode: str, draws):
        self.spec, self.mode, self.draws = spec, mode, draws
        steps, width = draws.resp_len.shape
        self.gen_done = np.full((steps, width), np.inf)  # when each sample's generation returns
        self.version_of = np.zeros((steps, width), dtype=np.int64)  # the policy version that generated it
        engine_model = StaticEngine if spec.rollout.batching == "static" else ContinuousEngine
        self.engine = engine_model(spec.rollout, self.gen_done, self.version_of, draws.tool_s)
        self.rewards = RewardQueue(spec.reward, width, spec.max_ahead(mode) + 2)
        self.kernel = Kernel()
        self.rec = Recorder(spec, mode)
        self.batches: dict = {}  # every launched batch (the detailed ones are kept for the trace)
        self.open: dict = {}  # launched batches not trained yet
        self.launched = 0
        self.version = 0  # the trainer's policy version
        self.first_minibatch = True

    def launched_at_least(self, k: int) -> float | None:
        return self.kernel.now if self.launched >= k else None

    def group_times(self, batch) -> dict[str, np.ndarray]:
        return batch.times(self.rewards, self.engine.revisions[batch.k])

    def busy(self, name: str, seconds: float):
        """The trainer works on `name` for `seconds` (longer while a colocated engine decodes)."""
        start = self.kernel.now
        if isinstance(self.engine, StaticEngine) and self.engine.shared and seconds > 0:  # only static shares
            self.engine.trainer_work(start, seconds)
            engine = self.engine
            yield self.kernel.until(lambda: engine.trainer_end if engine.trainer_end < math.inf else None)
            self.engine.trainer_done(self.kernel.now)
        else:
            yield self.kernel.at(start + seconds)
        self.rec.busy(name, start, self.kernel.now)

    def add_batch(self, batch) -> None:
        self.batches[batch.k] = self.open[batch.k] = batch
        self.launched = batch.k

    def forget(self, batch) -> None:
        self.open.pop(batch.k, None)
        if batch.k > self.spec.output.trace_detail_steps:
            self.batches.pop(batch.k, None)

    def run(self) -> SimRun:
        self.kernel.spawn(rollouter(self))
        self.kernel.spawn(trainer(self))
        stopped = None
        try:
            self.kernel.run()
        except StopRun as exc:
            stopped = str(exc)
        for k, batch in self.batches.items():
            batch.times_final = self.group_times(batch)
        rows, spans = self.rec.finish(self.engine, self.batches, self.draws)
        return SimRun(self.mode, rows, spans, stopped, self.kernel.events)


def simulate(spec, mode: str, draws) -> SimRun:
    """Simulate `spec`'s run under `mode` with these draws (draws.py)."""
    return Simulation(spec, mode, draws).run()
