"""The scheduling modes' rules as simulated processes: one rollouter, one trainer per mode.

The rules are those of rlrm/engine/scheduling (rollouter.py, overlap.py, sync.py):

- The rollouter launches batch k once the trainer holds policy version >= k - 1 - max_ahead
  (max_ahead 0 for sync, stream and pipeline, 1 for one-step-off, max_staleness for fully-async).
- sync scores a batch once all of it is generated; every other mode scores each sample the
  moment it is generated.
- stream, pipeline and one-step-off wait for batch k to be generated, collate it and compute its old
  (on-policy, when recomputed) and reference log-probs while its rewards still arrive, then compute the
  advantages, which need the scores, and train: stream and one-step-off once every sample is scored;
  pipeline each mini-batch (sync's, in order) as soon as its groups are scored, then the remaining epochs.
- fully-async takes scored groups oldest first: every group of a batch <= k (it is *due*: the last
  step its lag allows) and enough scored later groups to fill a step; it never recomputes old
  log-probs (the behaviour policy's are used), nor does one-step-off.
- The update ends with a weight sync (the engines pause; rlrm's hf engine first finishes its
  running batch) and the trainer then holds version k.
"""

from __future__ import annotations

import numpy as np

from rlrm.bench.simulate.batches import Batch, group_rows

ON_POLICY = ("sync", "stream", "pipeline")


class StopRun(Exception):
    """The run stops at this step, as training would: reward.on_failure is `fail` and a sample failed for good,
    or more than reward.max_failure_rate of the step's scored samples failed."""


def rollouter(sim):
    """Launch batch after batch as the trainer's version allows."""
    spec = sim.spec
    max_ahead = spec.max_ahead(sim.mode)
    submit = spec.rollout.submit_s
    for k in range(1, spec.workload.steps + 1):
        yield sim.kernel.until(lambda k=k: sim.kernel.now if sim.version >= k - 1 - max_ahead else None)
        launched = sim.kernel.now
        batch = Batch(
            k,
            launched,
            sim.draws,
            sim.gen_done[k - 1],
            sim.version_of[k - 1],
            spec.workload.samples_per_prompt,
            score_after_all=sim.mode == "sync",
        )
        if submit > 0:
            yield sim.kernel.at(launched + submit)
        sim.add_batch(batch)
        sim.engine.arrive(sim.kernel.now, k, batch.prompt_len, batch.resp_len)


def trainer(sim):
    """The trainer of `sim.mode`, step after step."""
    steps = sim.spec.workload.steps
    take = fully_async_step if sim.mode == "fully-async" else batch_step
    for k in range(1, steps + 1):
        sim.rec.begin_step(k, sim.kernel.now)
        yield from take(sim, k)
        yield from finish_update(sim, k)


def batch_step(sim, k: int):
    """sync, stream, pipeline, one-step-off: step k trains batch k."""
    kernel, spec = sim.kernel, sim.spec
    yield kernel.until(lambda: sim.launched_at_least(k))
    batch = sim.batches[k]
    waited = kernel.now
    yield kernel.until(lambda: float(batch.gen_done.max()))
    sim.rec.wait("gen", waited, kernel.now)
    scored = lambda: sim.group_times(batch)["scored_so_far"]  # noqa: E731  [P] all groups up to g scored
    if sim.mode == "sync":  # scores after generating, then computes everything in one go
        waited = kernel.now
        yield kernel.until(lambda: scored()[-1])
        sim.rec.wait("reward", waited, kernel.now)
    groups = np.arange(batch.prompts)
    kept = groups[~batch.group_failed] if spec.reward.on_failure == "drop-group" else groups
    sim.rec.dropped(groups.size - kept.size)
    _check_failures(sim, k, [(batch, groups)])
    # old/ref log-probs need the samples, not their scores: the overlapping modes compute them for the
    # whole batch while its rewards arrive; sync drops failed groups first (update.py prepare_batch)
    yield from prepare(sim, k, [(batch, kept if sim.mode == "sync" else groups)])
    chunks = split([(batch, kept)], spec.workload.mini_batch_prompts)
    first_epoch = 0
    if sim.mode == "pipeline":  # sync's mini-batches, in order, each as soon as its groups are scored
        for i, chunk in enumerate(chunks):
            last = int(chunk[-1][1][-1])
            waited = kernel.now
            yield kernel.until(lambda last=last: scored()[last])
            sim.rec.wait("reward", waited, kernel.now)
            yield from advantages(sim, chunk)  # each mini-batch's own, as grpo.score(groups=...) in pipeline.py
            yield from minibatch(sim, k, chunk, i, epoch=0)
        first_epoch = 1
    waited = kernel.now
    yield kernel.until(lambda: scored()[-1])
    sim.rec.wait("reward", waited, kernel.now)
    if sim.mode != "pipeline":  # the advantages need the scores (grpo.score after the wait, stream.py)
        yield from advantages(sim, [(batch, kept)])
    for epoch in range(first_epoch, spec.workload.ppo_epochs):
        for i, chunk in enumerate(chunks):
            yield from minibatch(sim, k, chunk, i, epoch)
    sim.rec.trained(k, [(batch, kept)])
    sim.forget(batch)


def fully_async_step(sim, k: int):
    """fully-async: due groups (batch <= k) and the oldest scored later groups, `prompts_per_step` in all."""
    kernel = sim.kernel
    start = kernel.now
    yield kernel.until(lambda: _take_time(sim, k))
    chosen = _choose(sim, k, kernel.now)
    generated = max((sim.group_times(b)["group_generated"][g].max(initial=start) for b, g in chosen), default=start)
    sim.rec.wait("gen", start, min(max(generated, start), kernel.now))
    sim.rec.wait("reward", max(generated, start), kernel.now)
    _check_failures(sim, k, chosen)
    for batch, groups in chosen:
        batch.taken[groups] = True
        if batch.taken.all():
            sim.forget(batch)
    if sim.spec.reward.on_failure == "drop-group":
        sim.rec.dropped(sum(int(b.group_failed[g].sum()) for b, g in chosen))
        chosen = [(b, g[~b.group_failed[g]]) for b, g in chosen]
    yield from prepare(sim, k, chosen)
    yield from advantages(sim, chosen)
    chunks = split(chosen, sim.spec.workload.mini_batch_prompts)
    for epoch in range(sim.spec.workload.ppo_epochs):
        for i, chunk in enumerate(chunks):
            yield from minibatch(sim, k, chunk, i, epoch)
    sim.rec.trained(k, chosen)


def split(chosen: list, size: int) -> list[list]:
    """Mini-batches of `size` groups over `chosen` ((batch, groups) in training order)."""
    chunks, current, room = [], [], size
    for batch, groups in chosen:
        at = 0
        while at < groups.size:
            part = groups[at : at + room]
            current.append((batch, part))
            at, room = at + part.size, room - part.size
            if room == 0:
                chunks.append(current)
                current, room = [], size
    if current:
        chunks.append(current)
    return chunks


def _take_time(sim, k: int) -> float | None:
    """When the fully-async trainer's take condition holds (overlap.py `_take_groups`), or None."""
    want = sim.spec.workload.prompts_per_step
    due_done, extra = -np.inf, []
    due_count = 0
    for b in sorted(sim.open):
        batch = sim.open[b]
        open_groups = ~batch.taken
        scored = sim.group_times(batch)["group_scored"][open_groups]
        if b <= k:
            due_count += scored.size
            due_done = max(due_done, scored.max(initial=-np.inf))
        else:
            extra.append(scored)
    need = want - due_count
    if need <= 0:
        return max(due_done, sim.kernel.now)
    later = np.concatenate(extra) if extra else np.zeros(0)
    if later.size >= need:
        return max(due_done, float(np.partition(later, need - 1)[need - 1]), sim.kernel.now)
    if sim.launched == sim.spec.workload.steps:  # nothing more will come: take what there is
        return max(due_done, later.max(initial=-np.inf), sim.kernel.now)
    return None


def _choose(sim, k: int, now: float) -> list[tuple[Batch, np.ndarray]]:
    want = sim.spec.workload.prompts_per_step
    chosen, due = [], 0
    for b in sorted(sim.open):
        batch = sim.open[b]
        groups = np.flatnonzero(~batch.taken)
        if b <= k:
            chosen.append((batch, groups))
            due += groups.size
    room = max(0, want - due)
    for b in sorted(sim.open):
        batch = sim.open[b]
        if b <= k or room == 0:
            continue
        groups = np.flatnonzero(~batch.taken)
        ready = groups[sim.group_times(batch)["group_scored"][groups] <= now][:room]
        if ready.size:
            chosen.append((batch, ready))
            room -= ready.size
    return [(b, g) for b, g in chosen if g.size]


def prepare(sim, k: int, chosen):
    """Collate, and old/ref log-probs where the mode computes them, on the trainer: what needs no scores.

    The trainer times collation with the old log-probs (step.py `prepare`), in every mode."""
    cost, w = sim.spec.trainer, sim.spec.workload
    tokens = float(sum(b.group_tokens[g].sum() for b, g in chosen))
    collate = cost.collate_s + cost.collate_s_per_token * tokens
    if sim.mode in ON_POLICY and w.recompute_old_log_prob:
        yield from sim.busy(
            "old_log_prob", collate + cost.old_log_prob_s + cost.old_log_prob_s_per_token * tokens / cost.ranks
        )
    elif collate > 0:
        yield from sim.busy("old_log_prob", collate)
    if w.use_ref:
        yield from sim.busy("ref", cost.ref_s + cost.ref_s_per_token * tokens / cost.ranks)


def advantages(sim, chosen):
    """GRPO advantages of `chosen` ((batch, groups) pairs) on the trainer, once their scores are in."""
    cost = sim.spec.trainer
    samples = sum(g.size for _, g in chosen) * sim.spec.workload.samples_per_prompt
    yield from sim.busy("adv", cost.adv_s + cost.adv_s_per_sample * samples)


def minibatch(sim, k: int, chunk: list, index: int, epoch: int):
    """One optimizer step on a mini-batch ((batch, groups) pairs)."""
    cost = sim.spec.trainer
    tokens = float(sum(b.group_tokens[g].sum() for b, g in chunk))
    seconds = cost.minibatch_s + cost.minibatch_s_per_token * tokens / cost.ranks
    if sim.first_minibatch:  # warm-up: the first optimizer step of a run is the slow one
        seconds, sim.first_minibatch = seconds + cost.first_step_extra_s, False
    start = sim.kernel.now
    yield from sim.busy("update_actor", seconds)
    samples = sum(g.size for _, g in chunk) * sim.spec.workload.samples_per_prompt
    sim.rec.minibatch(k, start, sim.kernel.now, index, epoch, samples)


def finish_update(sim, k: int):
    """Weight sync (the engines pause), bookkeeping, then the trainer holds version k."""
    start = sim.kernel.now
    end = sim.engine.sync(start, sim.spec.trainer.weight_sync_s, k)
    yield sim.kernel.at(end)
    sim.rec.busy("update_weights", start, end)
    if sim.spec.trainer.step_overhead_s > 0:
        yield sim.kernel.at(sim.kernel.now + sim.spec.trainer.step_overhead_s)
    sim.rec.end_step(k, sim.kernel.now)
    sim.version = k


def _check_failures(sim, k: int, scored: list) -> None:
    """Count step k's scored samples (`(batch, groups)` pairs, before any group is dropped) and stop the run where
    training would: any sample failed for good under on_failure `fail`, or the failed share over
    reward.max_failure_rate (rlrm/engine/rewards/budget.py)."""
    n = sim.spec.workload.samples_per_prompt
    rows = [(b, group_rows(g, n)) for b, g in scored]
    failed = sum(int(b.failed[i].sum()) for b, i in rows)
    samples = sum(i.size for _, i in rows)
    sim.rec.scored(samples, failed)
    reward = sim.spec.reward
    if failed and reward.on_failure == "fail":
        raise StopRun(f"step {k}: a reward failed after {reward.max_retries} retries and reward.on_failure is fail")
    if samples and failed / samples > reward.max_failure_rate:
        raise StopRun(
            f"step {k}: {failed} of {samples} reward samples failed ({failed / samples:.0%}), over "
            f"reward.max_failure_rate={reward.max_failure_rate:g}; the run stops here, as training would"
        )
