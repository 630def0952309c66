"""The overlapping modes: stream, pipeline, one-step-off and fully-async.

    scheduler = make_scheduler(parts, loader, start_step=0, spans=spans)
    metrics = await scheduler.step(k, timer)     # one trained step, whatever the mode
    scheduler.loader_state()                      # the resume point after the last trained step
    await scheduler.close()

All of them run a Rollouter (generation and per-sample scoring in the background) and train in
a dedicated trainer thread, so generation, rewards and training overlap on the event loop:

| mode          | rollouter runs ahead by | the trainer takes                                   |
|---------------|-------------------------|-----------------------------------------------------|
| stream        | 0 versions              | batch k once every sample is scored (*)             |
| pipeline      | 0 versions              | batch k mini-batch by mini-batch, as groups are scored (*) |
| one-step-off  | 1 version               | batch k once every sample is scored (*)             |
| fully-async   | max_staleness versions  | any scored groups, oldest first; a group that would get too stale is taken first |

(*) The old and reference log-probs need the samples, not their scores: the trainer computes
them as soon as batch k is generated, while its rewards are still arriving.

The trainer's waits are timed: `timing_s/gen` while the samples it needs are still being
generated (lane gen_wait), `timing_s/reward` once they are generated but not yet scored (lane
reward_wait).
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from rlrm.engine.metrics.timing import StepTimer
from rlrm.engine.scheduling.rollouter import Group, Rollouter

OFF_POLICY = ("one-step-off", "fully-async")


class SyncScheduler:
    """sync mode: the step's prompts are generated, then scored, then trained, one after another."""

    def __init__(self, parts, loader):
        self.parts, self.loader = parts, loader

    async def step(self, step: int, timer: StepTimer) -> dict:
        from rlrm.engine.data.prompts import encode_prompts
        from rlrm.engine.scheduling.sync import sync_step

        p = self.parts.profile
        state = self.loader.state_dict()
        examples = self.loader.next_batch()
        try:
            ids, kept, dropped = encode_prompts(
                examples, self.parts.tokenizer, p.data.max_prompt_length, p.data.prompt_too_long
            )
            metrics = await sync_step(self.parts, kept, ids, step, timer)
        except BaseException:
            self.loader.load_state_dict(state)  # the step never happened: replay its prompts on resume
            raise
        return {**metrics, "data/dropped_prompts": dropped}

    def loader_state(self) -> dict:
        return self.loader.state_dict()

    async def close(self) -> None:
        return None


class OverlapScheduler:
    """Base of the overlapping modes: a rollouter in the background, training in a trainer thread."""

    mode = "stream"
    off_policy = False

    def __init__(self, parts, loader, start_step: int, spans: list, max_ahead: int):
        self.parts = parts
        self.rollouter = Rollouter(parts, loader, start_step + 1, max_ahead, spans)
        self._loader_state = loader.state_dict()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlrm-trainer")

    async def step(self, step: int, timer: StepTimer) -> dict:
        if self.rollouter._main is None:
            self.rollouter.start()
        metrics = await self.train_step(step, timer)
        self.rollouter.set_version(step)
        return metrics

    async def train_step(self, step: int, timer: StepTimer) -> dict:
        """Stream, one-step-off: wait for batch k to be generated, compute its old/ref log-probs
        while its rewards are still arriving, then train on it once every sample is scored."""
        from rlrm.engine.update import staleness_metrics

        launched, batch, prepared = await self._generated_and_prepared(step, timer)
        groups = launched.groups
        waited = time.perf_counter()
        while not all(g.scored for g in groups):
            await self.rollouter.wait_changed()
        timer.add("reward", "reward_wait", waited, time.perf_counter())
        reward_metrics = self.parts.reward.loop.take_metrics()
        update = await self.in_trainer(_update_prepared, self.parts, batch, groups, step, timer)
        metrics = {**prepared, **reward_metrics, **update}  # the update counts the dropped groups
        self._trained(step, launched)
        completions = [c for g in groups for c in g.completions]
        samples = [t for g in groups for t in g.triples()]
        return {**metrics, **staleness_metrics(completions, step - 1), "data/dropped_prompts": launched.dropped_prompts, "_samples": samples}

    def loader_state(self) -> dict:
        return self._loader_state

    async def close(self) -> None:
        await self.rollouter.close()
        await asyncio.get_running_loop().run_in_executor(None, self._thread.shutdown, True)

    async def in_trainer(self, fn, *args):
        """Run `fn(*args)` in the trainer thread. An interrupt waits for it to finish (a step is
        trained whole or not at all) and is raised again at the next await."""
        future = asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            result = await future
            asyncio.current_task().cancel()
            return result

    async def _generated_and_prepared(self, k: int, timer: StepTimer):
        """Batch k once every sample is generated (the wait timed as gen), collated with its
        old/ref log-probs: (launched batch, collated batch, rollout/* metrics)."""
        start = time.perf_counter()
        launched = await self.rollouter.batch(k)
        while not all(g.generated for g in launched.groups):
            await self.rollouter.wait_changed()
        timer.add("gen", "gen_wait", start, time.perf_counter())
        completions = [c for g in launched.groups for c in g.completions]
        batch, metrics = await self.in_trainer(_prepare_full_batch, self.parts, completions, timer, self.off_policy)
        return launched, batch, metrics

    def _trained(self, step: int, launched) -> None:
        self._loader_state = launched.loader_state
        self.rollouter.forget(step)


class StreamScheduler(OverlapScheduler):
    mode = "stream"


class OneStepOffScheduler(OverlapScheduler):
    mode = "one-step-off"
    off_policy = True


class PipelineScheduler(OverlapScheduler):
    """pipeline: mini-batch updates start as soon as their groups are scored.

    Mini-batches are the ones sync mode would form (consecutive surviving groups, in prompt
    order) and are trained in that order, so a step's update equals sync's exactly; only the
    waiting moves. Old and reference log-probs are computed once the batch is generated, while
    its rewards are still arriving.
    """

    mode = "pipeline"

    async def train_step(self, step: int, timer: StepTimer) -> dict:
        from rlrm.engine.update import staleness_metrics

        parts = self.parts
        launched, batch, metrics = await self._generated_and_prepared(step, timer)
        groups = launched.groups
        size, n = parts.profile.actor.mini_batch_size, parts.profile.rollout.n
        history, ready, kept, dropped = [], [], [], 0
        for g in groups:
            if not g.scored:
                waited = time.perf_counter()
                while not g.scored:
                    await self.rollouter.wait_changed()
                timer.add("reward", "reward_wait", waited, time.perf_counter())
            if any(r is None for r in g.results):
                dropped += 1
                continue
            ready.append(g)
            kept.append(g)
            if len(ready) == size:
                history.append(await self.in_trainer(_train_groups, parts, batch, ready, n, timer, len(history)))
                ready = []
        if ready:
            history.append(await self.in_trainer(_train_groups, parts, batch, ready, n, timer, len(history)))
        reward_metrics = parts.reward.loop.take_metrics()
        metrics.update(await self.in_trainer(_finish_update, parts, batch, kept, n, history, step, timer))
        metrics.update(reward_metrics)
        metrics["reward/dropped_groups"] = dropped
        self._trained(step, launched)
        kept_completions = [c for g in kept for c in g.completions]
        samples = [t for g in groups for t in g.triples()]
        return {
            **metrics, **staleness_metrics(kept_completions, step - 1),
            "data/dropped_prompts": launched.dropped_prompts, "_samples": samples,
        }  # fmt: skip


class FullyAsyncScheduler(OverlapScheduler):
    """fully-async: the trainer takes scored groups as they come, oldest first.

    A group launched while the trainer held version v may be trained up to step v + 1 +
    max_staleness; at that step it is *due* and the trainer waits for it. The rollouter launches
    batch k only at version >= k - 1 - max_staleness, so at most one batch of groups is ever due.
    """

    mode = "fully-async"
    off_policy = True

    def __init__(self, parts, loader, start_step: int, spans: list, max_ahead: int):
        super().__init__(parts, loader, start_step, spans, max_ahead)
        self._taken: set[int] = set()

    async def train_step(self, step: int, timer: StepTimer) -> dict:
        from rlrm.engine.update import staleness_metrics, update_policy

        groups = await self._take_groups(step, timer)
        completions = [c for g in groups for c in g.completions]
        results = [r for g in groups for r in g.results]
        reward_metrics = self.parts.reward.loop.take_metrics()
        metrics = await self.in_trainer(
            update_policy, self.parts, completions, results, step, timer, reward_metrics, True
        )
        self._loader_state = self.rollouter.loader_states[step]  # a step's worth of prompts consumed
        for k in [k for k, b in self.rollouter.batches.items() if all(g.order in self._taken for g in b.groups)]:
            self.rollouter.forget(k)
        samples = [t for g in groups for t in g.triples()]
        return {**metrics, **staleness_metrics(completions, step - 1), "data/dropped_prompts": 0, "_samples": samples}

    async def _take_groups(self, step: int, timer: StepTimer) -> list[Group]:
        want = self.parts.profile.data.train_batch_size
        start = time.perf_counter()
        while True:
            pending = [g for b in self.rollouter.batches.values() for g in b.groups if g.order not in self._taken]
            # Batch b started at version >= b - 1 - max_staleness, so step b is the last it may train in.
            due = [g for g in pending if g.batch <= step]
            extra = [g for g in pending if g.batch > step and g.scored]
            finished = self.rollouter.next_batch > self.rollouter.last_batch
            if all(g.scored for g in due) and (
                len(due) + len(extra) >= want or (finished and all(g.scored for g in pending))
            ):
                break
            await self.rollouter.wait_changed()
        chosen = sorted(due + extra[: max(0, want - len(due))], key=lambda g: g.order)
        needed_generated = max((g.generated_at for g in chosen), default=start)
        end = time.perf_counter()
        timer.add("gen", "gen_wait", start, min(max(needed_generated, start), end))
        timer.add("reward", "reward_wait", max(needed_generated, start), end)
        self._taken.update(g.order for g in chosen)
        return chosen


def _prepare_full_batch(parts, completions: list, timer: StepTimer, off_policy: bool):
    """Collate every sample of the batch and set its old/ref log-probs: they need the samples,
    not their scores, so the trainer computes them while rewards are still arriving."""
    import torch

    from rlrm.engine.actor.batch import collate
    from rlrm.engine.update import behaviour_log_probs

    with timer("adv"):
        batch = collate(completions, parts.tokenizer.pad_token_id)
        batch.group_ids = torch.arange(len(completions)) // parts.profile.rollout.n
        batch = batch.to(parts.device)
    return batch, behaviour_log_probs(parts, batch, timer, off_policy)


def _rows(groups: list[Group], n: int):
    import torch

    return torch.tensor([g.position * n + j for g in groups for j in range(n)], dtype=torch.long)


def _train_groups(parts, batch, groups: list[Group], n: int, timer: StepTimer, index: int) -> dict:
    """One optimizer step on the mini-batch made of `groups` (all scored, none failed)."""
    from rlrm.engine.update import timed_mini_batch

    mb = _scored(parts, batch.select(_rows(groups, n)), groups)
    parts.actor.check_update_batch(mb)
    with timer("update_actor"):
        return timed_mini_batch(parts.actor, mb, timer, f"mini-batch {index}")


def _update_prepared(parts, batch, groups: list[Group], step: int, timer: StepTimer) -> dict:
    """Stream, one-step-off: the whole update on the prepared batch once every sample is scored.

    Groups holding a failed sample are dropped, as `update_policy` drops them; the rest are
    trained as sync mode trains them (same rows in the same order, same advantages).
    """
    kept = [g for g in groups if all(r is not None for r in g.results)]
    metrics = _finish_update(parts, batch, kept, parts.profile.rollout.n, [], step, timer, first_epoch=0)
    return {**metrics, "reward/dropped_groups": len(groups) - len(kept)}


def _finish_update(
    parts, batch, kept: list[Group], n: int, history: list, step: int, timer: StepTimer, first_epoch: int = 1
) -> dict:
    """The PPO epochs from `first_epoch` on over the surviving groups, the scheduler step, the weight sync."""
    from rlrm.engine.update import batch_metrics, sync_weights, timed_mini_batch

    if not kept:
        return {"batch/num_samples": 0}
    full = _scored(parts, batch.select(_rows(kept, n)), kept)
    if first_epoch == 0:
        parts.actor.check_update_batch(full)
    with timer("update_actor"):
        for epoch in range(first_epoch, parts.profile.actor.ppo_epochs):
            for i, rows in enumerate(parts.actor.mini_batch_indices(full)):
                history.append(timed_mini_batch(parts.actor, full.select(rows), timer, f"mini-batch {i}", epoch))
        metrics = parts.actor.end_update(history)
    sync_weights(parts, step, timer)
    completions = [c for g in kept for c in g.completions]
    metrics.update(batch_metrics(completions, full.scores.cpu(), full.advantages.cpu()))
    return metrics


def _scored(parts, rows, groups: list[Group]):
    """`rows` (the samples of `groups`, in order) with their scores and GRPO advantages set."""
    import torch

    from rlrm.engine.update import group_advantages

    scores = torch.tensor([r.score for g in groups for r in g.results], dtype=torch.float32)  # [B]
    rows.scores = scores.to(parts.device)
    rows.advantages = group_advantages(parts.profile, scores, rows.group_ids.cpu()).to(parts.device)
    return rows


def make_scheduler(parts, loader, start_step: int, spans: list):
    """The scheduler for `trainer.mode`."""
    trainer = parts.profile.trainer
    mode = trainer.mode
    if mode == "sync":
        return SyncScheduler(parts, loader)
    if mode == "stream":
        return StreamScheduler(parts, loader, start_step, spans, max_ahead=0)
    if mode == "pipeline":
        return PipelineScheduler(parts, loader, start_step, spans, max_ahead=0)
    if mode == "one-step-off":
        return OneStepOffScheduler(parts, loader, start_step, spans, max_ahead=1)
    if mode == "fully-async":
        return FullyAsyncScheduler(parts, loader, start_step, spans, max_ahead=trainer.max_staleness)
    raise ValueError(f"unknown trainer.mode {mode!r}")
