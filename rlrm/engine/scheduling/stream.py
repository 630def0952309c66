"""stream mode: each sample is scored the moment it is generated; the trainer prepares the batch's
old/ref log-probs while the rewards arrive, then trains on it once every sample is scored.

Same samples, same order, same maths as sync (tested bit for bit): only the waiting moves.
"""

from __future__ import annotations

from rlrm.engine.metrics.timing import StepTimer
from rlrm.engine.scheduling.overlap import OverlapScheduler, results_of
from rlrm.engine.step import StepRecord


class StreamScheduler(OverlapScheduler):
    async def train_step(self, step: int, timer: StepTimer) -> StepRecord:
        grpo = self.run.grpo
        launched, batch, rollout_metrics = await self.generated_and_prepared(step, timer)
        groups = launched.groups
        await self.scored(groups, timer)
        metrics = self.reward_metrics(groups)  # every reward of the step is in (none of batch k+1's: one-step-off)
        scored = await self.in_trainer(grpo.score, batch, results_of(groups), timer)
        self.run.reward.loop.check_budget(step, metrics, scored.dropped_groups)  # before the update
        metrics.update(rollout_metrics)
        metrics.update(await self.in_trainer(grpo.train, scored.batch, timer))
        await self.publish(step, timer)
        self.trained(launched)
        return self.record(step, groups, [scored], metrics, launched.dropped_prompts)
