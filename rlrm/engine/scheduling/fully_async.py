"""fully-async mode: the rollouter keeps generating and scoring ahead; the trainer takes scored groups
as they come, oldest first.

A group launched while the trainer held version v may be trained up to step v + 1 + max_staleness;
at that step it is *due* and the trainer waits for it. The rollouter launches batch k only at
version >= k - 1 - max_staleness, so the groups of batch k are due at step k, and at most one
batch of groups is ever due.

A step's reward/* counters and failure budget are those of the samples of the groups it takes (each sample
is counted under its group: rlrm/engine/rewards/tags.py), whichever batches they come from; a failed sample
(reward.on_failure=fail) stops the step at which its group is due, the one that must wait for it.

Resume: the checkpoint of step k holds the loader's state after batch k and the positions of the
groups of later batches that were trained early (every group of batches <= k was trained by then:
they were due). A resumed run launches batch k+1 without those prompts, so each prompt is trained
once, as in an uninterrupted run. Its samples are generated again, with the checkpoint's policy:
samples in flight are never saved, since the policies that were generating them no longer exist
after a restart, so an off-policy run resumes with the same prompts, not with the same samples.
"""

from __future__ import annotations

import time

from rlrm.engine.metrics.timing import StepTimer
from rlrm.engine.scheduling.base import RunParts
from rlrm.engine.scheduling.overlap import OverlapScheduler, completions_of, results_of
from rlrm.engine.scheduling.rollouter import Group
from rlrm.engine.step import StepRecord


class FullyAsyncScheduler(OverlapScheduler):
    off_policy = True

    def __init__(self, run: RunParts, start_step: int, resume: dict | None = None):
        ahead = (resume or {}).get("trained_ahead", {})
        super().__init__(run, start_step, skip={int(k): set(v) for k, v in ahead.items()})
        self._last_step = start_step

    def loader_state(self) -> dict:
        ahead = self.rollouter.taken_ahead(after=self._last_step)
        return {**self._loader_state, "trained_ahead": {str(k): v for k, v in ahead.items()}}

    @staticmethod
    def max_ahead(run: RunParts) -> int:
        return run.profile.trainer.max_staleness

    async def train_step(self, step: int, timer: StepTimer) -> StepRecord:
        grpo = self.run.grpo
        groups = await self._take_groups(step, timer)
        own = self.rollouter.record(step)  # launched: its groups were due at this step
        metrics = self.reward_metrics(groups)  # every reward of the groups taken is in, and only theirs
        batch, rollout_metrics = await self.in_trainer(grpo.prepare, completions_of(groups), True, timer)
        scored = await self.in_trainer(grpo.score, batch, results_of(groups), timer)
        self.run.reward.loop.check_budget(step, metrics, scored.dropped_groups)  # before the update
        metrics.update(rollout_metrics)
        metrics.update(await self.in_trainer(grpo.train, scored.batch, timer))
        await self.publish(step, timer)
        # only now are the groups trained: a step that raised leaves them pending, out of the checkpoint's
        # trained_ahead (the next pending() is this scheduler's next step, so nothing else can hand them out)
        self.rollouter.take(groups)
        self._loader_state, self._last_step = own.loader_state, step  # a step's worth of prompts consumed
        return self.record(step, groups, [scored], metrics, own.dropped_prompts)

    async def _take_groups(self, step: int, timer: StepTimer) -> list[Group]:
        want = self.run.profile.data.train_batch_size
        start = time.perf_counter()
        while True:
            pending = self.rollouter.pending()
            # Batch b started at version >= b - 1 - max_staleness, so step b is the last it may train in.
            due = [g for g in pending if g.batch <= step]
            extra = [g for g in pending if g.batch > step and g.scored]
            # Fewer groups than a batch may be all this step gets: batches that lost prompts to the length filter
            # (data.prompt_too_long=drop) or to a resume, when no other batch may launch before this step publishes
            # and every group launched is scored (or failed: a later batch's failure is its own step's to raise).
            settled = self.rollouter.held_back and all(g.scored or g.error is not None for g in pending)
            if all(g.scored for g in due) and (len(due) + len(extra) >= want or settled):
                break
            await self.rollouter.wait_changed(due)  # a failed sample of a due group stops this step
        chosen = sorted(due + extra[: max(0, want - len(due))], key=lambda g: g.order)
        # every chosen group is scored, so generated: the filter only tells the type checker so
        needed_generated = max((g.generated_at for g in chosen if g.generated_at is not None), default=start)
        end = time.perf_counter()
        timer.add("gen", "gen_wait", start, min(max(needed_generated, start), end))
        timer.add("reward", "reward_wait", max(needed_generated, start), end)
        return chosen
