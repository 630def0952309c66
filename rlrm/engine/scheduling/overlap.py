"""What the overlapping modes share: a rollouter in the background and a dedicated trainer thread.

| mode          | rollouter runs ahead by | the trainer takes                                           |
|---------------|-------------------------|-------------------------------------------------------------|
| stream        | 0 versions              | batch k once every sample is scored (*)                     |
| pipeline      | 0 versions              | batch k mini-batch by mini-batch, as groups are scored (*)  |
| one-step-off  | 1 version               | batch k once every sample is scored (*)                     |
| fully-async   | max_staleness versions  | any scored groups, oldest first; a group about to get too stale first |

(*) The old and reference log-probs need the samples, not their scores: the trainer computes
them as soon as batch k is generated, while its rewards are still arriving.

Training runs in the trainer thread so that generation and rewards go on on the event loop. The
trainer's waits are timed: `timing_s/gen` while the samples it needs are still being generated
(lane gen_wait), `timing_s/reward` once they are generated but not yet scored (lane reward_wait).

A step's reward/* counters and failure budget are those of the groups it trains, whatever else the rollouter
scored meanwhile (`reward_metrics`); a failed sample stops the step that waits for its group, not an earlier one.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from rlrm.engine.metrics.timing import StepTimer
from rlrm.engine.scheduling.base import RunParts
from rlrm.engine.scheduling.rollouter import Group, LaunchedBatch, Rollouter
from rlrm.engine.step import Scored, StepRecord


class OverlapScheduler:
    """Base of the overlapping modes; a subclass sets `max_ahead`/`off_policy` and writes `train_step`, which
    ends with `publish` (the rollouter may then launch with the new weights) and `record`."""

    off_policy = False

    def __init__(self, run: RunParts, start_step: int, resume: dict | None = None, skip: dict | None = None):
        self.run = run
        self.rollouter = Rollouter(run, start_step + 1, self.max_ahead(run), skip)
        self._loader_state = run.prompts.state_dict()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlrm-trainer")
        self._interrupted = False  # an interrupt came while the trainer thread worked (in_trainer)

    @staticmethod
    def max_ahead(run: RunParts) -> int:
        """How many policy versions the rollouter may run ahead of the trainer."""
        return 0

    async def step(self, step: int, timer: StepTimer) -> StepRecord:
        if self._interrupted:  # it lands here, between two steps, if no await of the last step raised it
            raise asyncio.CancelledError
        if not self.rollouter.started:
            self.rollouter.start()
        return await self.train_step(step, timer)

    async def train_step(self, step: int, timer: StepTimer) -> StepRecord:
        raise NotImplementedError

    async def publish(self, step: int, timer: StepTimer) -> None:
        """The update of step `step` is done: the engine gets its weights (in the trainer thread: a weight sync
        blocks), then the rollouter learns the version and may launch the batches it allows."""
        weights = self.run.weights
        await self.in_trainer(weights.publish, step, timer)
        self.rollouter.set_version(weights.version)

    @staticmethod
    def record(step: int, groups: list[Group], scored: list[Scored], metrics: dict, dropped_prompts: int) -> StepRecord:
        """What step `step` trained, from the groups it took."""
        return StepRecord(step, scored, completions_of(groups), triples_of(groups), metrics, dropped_prompts)

    def loader_state(self) -> dict:
        return self._loader_state

    async def close(self) -> None:
        await self.rollouter.close()
        await asyncio.get_running_loop().run_in_executor(None, self._thread.shutdown, True)

    async def in_trainer(self, fn, *args):
        """Run `fn(*args)` in the trainer thread. An interrupt waits for it to finish (a step is
        trained whole or not at all) and is raised again at the next await, or at the next step's start: a step
        whose every await is in_trainer (fully-async with its groups ready) absorbed it in each, and trained on."""
        future = asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            self._interrupted = True
            result = await future
            task = asyncio.current_task()
            if task is not None:  # always: this is a coroutine
                task.cancel()
            return result

    async def generated_and_prepared(self, k: int, timer: StepTimer):
        """Batch k once every sample is generated (the wait timed as gen), collated with its old/ref
        log-probs: (launched batch, prepared batch, rollout/* metrics)."""
        start = time.perf_counter()
        launched = await self.rollouter.batch(k)
        while not all(g.generated for g in launched.groups):
            await self.rollouter.wait_changed(launched.groups)
        timer.add("gen", "gen_wait", start, time.perf_counter())
        batch, metrics = await self.in_trainer(
            self.run.grpo.prepare, completions_of(launched.groups), self.off_policy, timer
        )
        return launched, batch, metrics

    async def scored(self, groups: list[Group], timer: StepTimer) -> None:
        """Until every group of `groups` is scored (the wait timed as reward)."""
        if all(g.scored for g in groups):
            return
        start = time.perf_counter()
        await self.until_scored(groups)
        timer.add("reward", "reward_wait", start, time.perf_counter())

    async def until_scored(self, groups: list[Group]) -> None:
        """Until every group of `groups` is scored (untimed: the caller times its own wait)."""
        while not all(g.scored for g in groups):
            await self.rollouter.wait_changed(groups)

    def reward_metrics(self, groups: list[Group]) -> dict:
        """The reward/* counters of `groups`' samples (then reset): the step's own, not those of the batches
        scored ahead meanwhile (rlrm/engine/rewards/tags.py)."""
        return self.run.reward.loop.take_metrics(tags=reward_tags(groups))

    def trained(self, launched: LaunchedBatch) -> None:
        """Batch `launched` is trained: its groups are done, the loader may resume after it."""
        self._loader_state = launched.loader_state
        self.rollouter.take(launched.groups)


def reward_tags(groups: list[Group]) -> list[int]:
    """The SCORED_FOR tags the rollouter scored `groups`' samples under."""
    return [g.order for g in groups]


def completions_of(groups: list[Group]) -> list:
    return [c for g in groups for c in g.completions]


def results_of(groups: list[Group]) -> list:
    return [r for g in groups for r in g.results]


def triples_of(groups: list[Group]) -> list:
    return [t for g in groups for t in g.triples()]
