"""pipeline mode: each mini-batch update starts as soon as its groups are scored.

The mini-batches are the ones sync mode forms (consecutive surviving groups, in prompt order) and
are trained in that order, so a step's update equals sync's exactly; only the waiting moves. Old
and reference log-probs are computed once the batch is generated, while its rewards still arrive.
The whole update is one `Actor.update` call in the trainer thread, fed the first epoch's
mini-batches by `ScoredMiniBatches`, which waits for each one's groups on the event loop.
"""

from __future__ import annotations

import asyncio
import time

from rlrm.engine.metrics.timing import StepTimer
from rlrm.engine.scheduling.overlap import OverlapScheduler, results_of, reward_tags
from rlrm.engine.scheduling.rollouter import Group
from rlrm.engine.step import GRPOStep, Scored, StepRecord


class PipelineScheduler(OverlapScheduler):
    async def train_step(self, step: int, timer: StepTimer) -> StepRecord:
        grpo = self.run.grpo
        launched, batch, metrics = await self.generated_and_prepared(step, timer)
        groups = launched.groups
        arrivals = ScoredMiniBatches(self, grpo, batch, groups, self.run.profile.actor.mini_batch_size, timer, step)
        metrics.update(await self.in_trainer(grpo.train, arrivals, timer))
        metrics.update(self.reward_metrics(groups))  # the last reward came in during the update
        await self.publish(step, timer)
        self.trained(launched)
        return self.record(step, groups, arrivals.scored or [Scored(None, [], 0)], metrics, launched.dropped_prompts)


class ScoredMiniBatches:
    """The first epoch's mini-batches, iterated in the trainer thread: each is yielded once its
    `size` surviving groups are scored (groups with a failed sample are dropped, as in sync)."""

    def __init__(
        self, scheduler: OverlapScheduler, grpo: GRPOStep, batch, groups: list[Group], size: int, timer, step: int = 0
    ):
        self.scheduler, self.grpo, self.batch, self.groups = scheduler, grpo, batch, groups
        self.size, self.timer, self.step = size, timer, step
        self.loop = asyncio.get_running_loop()
        self.scored: list[Scored] = []  # one per mini-batch, and one for trailing dropped groups

    def __iter__(self):
        ready: list[int] = []
        dropped = total_dropped = 0
        for g in self.groups:
            self._wait_scored(g)
            if any(r is None for r in g.results):
                dropped += 1
                total_dropped += 1
                continue
            ready.append(g.position)
            if len(ready) == self.size:
                self._check_budget(total_dropped)
                yield self._score(ready, dropped)
                ready, dropped = [], 0
        if ready:
            self._check_budget(total_dropped)
            yield self._score(ready, dropped)
        elif dropped:
            self.scored.append(Scored(None, [], dropped))

    def _check_budget(self, dropped: int) -> None:
        """Before each mini-batch trains: the failures so far, over the step's samples, within the budget."""
        loop = self.scheduler.run.reward.loop
        of_samples = len(self.groups) * self.grpo.settings.n
        so_far = loop.stats_of(reward_tags(self.groups)).metrics()
        loop.check_budget(self.step, so_far, dropped, of_samples, trained=bool(self.scored))

    def _score(self, positions: list[int], dropped: int):
        scored = self.grpo.score(self.batch, results_of(self.groups), self.timer, groups=positions)
        scored.dropped_groups += dropped
        self.scored.append(scored)
        return scored.batch

    def _wait_scored(self, group: Group) -> None:
        """Block the trainer thread until `group` is scored (the wait runs on the event loop)."""
        if not group.scored:
            start = time.perf_counter()
            asyncio.run_coroutine_threadsafe(self.scheduler.until_scored([group]), self.loop).result()
            self.timer.add("reward", "reward_wait", start, time.perf_counter())
