"""stream mode: each sample is scored the moment it is generated; the trainer prepares the batch's
old/ref log-probs while the rewards arrive, then trains on it once every sample is scored.

Same samples, same order, same maths as sync (tested bit for bit): only the waiting moves.
"""

from __future__ import annotations

from rlrm.engine.metrics.timing import StepTimer
from rlrm.engine.scheduling.overlap import OverlapScheduler, completions_of, results_of, triples_of
from rlrm.engine.step import StepOutcome, StepRecord


class StreamScheduler(OverlapScheduler):
    async def train_step(self, step: int, timer: StepTimer) -> StepOutcome:
        grpo = self.run.grpo
        launched, batch, metrics = await self.generated_and_prepared(step, timer)
        groups = launched.groups
        await self.scored(groups, timer)
        reward_metrics = self.run.reward.loop.take_metrics()
        scored = await self.in_trainer(grpo.score, batch, results_of(groups), timer)
        self.run.reward.loop.check_budget(step, reward_metrics, scored.dropped_groups)  # before the update
        metrics.update(await self.in_trainer(grpo.train, scored.batch, step, timer))
        self.trained(launched)
        return grpo.finish(
            StepRecord(
                step,
                [scored],
                completions_of(groups),
                triples_of(groups),
                {**metrics, **reward_metrics},
                launched.dropped_prompts,
            )
        )
