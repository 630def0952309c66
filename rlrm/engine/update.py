"""From scored rollouts to a policy update: advantages, old/ref log-probs, actor step, weight sync.

Every scheduling mode trains through these functions, so the maths of a step is written once.
They are synchronous on purpose: `sync` mode calls them on the event loop (an interrupt lands
before the update or after it, never inside), the overlapping modes in their trainer thread.
"""

from __future__ import annotations

import time

from rlrm.engine.behaviour import needs_recompute
from rlrm.engine.metrics.timing import StepTimer


def update_policy(
    parts, completions: list, results: list, step: int, timer: StepTimer, reward_metrics: dict, off_policy: bool = False
) -> dict:
    """Train on one step's scored samples and push the new weights to the rollout engine.

    Args:
        parts: the run's Components.
        completions: n per prompt, prompt-major.
        results: one RewardResult (or None: failed, drop its group) per completion.
        step: the step number (becomes the engine's policy version).
        timer: collects `timing_s/*`.
        reward_metrics: the reward loop's counters for this step (taken on the event loop).
        off_policy: the samples may come from older policies: the ratio uses the behaviour
            policy's log-probs (the rollout engine's), never a recomputation.

    Returns:
        Metrics of the update and of the batch.
    """
    actor = parts.actor
    prepared = prepare_batch(parts, completions, results, timer)
    if prepared is None:  # every group dropped: nothing to learn from
        groups = len(completions) // parts.profile.rollout.n
        return {**reward_metrics, "reward/dropped_groups": groups, "batch/num_samples": 0}
    batch, kept, scores, dropped = prepared
    metrics = behaviour_log_probs(parts, batch, timer, off_policy)
    with timer("update_actor"):
        metrics.update(train_epochs(actor, batch, timer))
    sync_weights(parts, step, timer)
    metrics.update(reward_metrics)
    metrics["reward/dropped_groups"] = dropped
    metrics.update(batch_metrics(kept, scores, batch.advantages))
    return metrics


def prepare_batch(parts, completions: list, results: list, timer: StepTimer):
    """Drop failed groups, compute GRPO advantages and collate.

    Returns:
        (batch on the actor's device, kept completions, scores, dropped group count), or None
        when every group was dropped.
    """
    import torch

    from rlrm.engine.actor.batch import collate

    profile = parts.profile
    n = profile.rollout.n
    completions, results, dropped = drop_failed_groups(completions, results, n)
    if not completions:
        return None
    scores = torch.tensor([r.score for r in results], dtype=torch.float32)  # [B]
    group_ids = torch.arange(len(completions)) // n  # [B]
    with timer("adv"):
        advantages = group_advantages(profile, scores, group_ids)
        batch = collate(completions, parts.tokenizer.pad_token_id)
        batch.scores, batch.advantages, batch.group_ids = scores, advantages, group_ids
        batch = batch.to(parts.device)
    return batch, completions, scores, dropped


def group_advantages(profile, scores, group_ids):
    """GRPO advantages [B] of `scores` [B] within groups `group_ids` [B], with the profile's settings."""
    from rlrm.engine.algorithms import grpo_advantages

    return grpo_advantages(scores, group_ids, eps=profile.algorithm.adv_eps, norm_by_std=profile.algorithm.norm_adv_by_std)


def behaviour_log_probs(parts, batch, timer: StepTimer, off_policy: bool) -> dict:
    """Set `old_log_prob` (and `ref_log_prob` when a reference is used); returns rollout/* metrics.

    On-policy, the actor recomputes them when `actor.recompute_old_log_prob` says so (see
    `rlrm.engine.behaviour`; the gap to the engine's own log-probs is logged). Off-policy the
    engine's log-probs are the behaviour policy's and are used as they are.
    """
    actor = parts.actor
    metrics: dict[str, float] = {}
    recompute = needs_recompute(
        actor.cfg.recompute_old_log_prob, off_policy=off_policy, ppo_epochs=actor.cfg.ppo_epochs,
        engine_dtype=getattr(parts.engine, "dtype", None), actor_dtype=actor.dtype,
    )
    with timer("old_log_prob"):
        if recompute:
            batch.old_log_prob = actor.compute_old_log_prob(batch)
            # How far the rollout engine's log-probs are from the actor's (0 up to float noise).
            gap = (batch.old_log_prob - batch.rollout_log_prob).abs() * batch.response_mask
            metrics["rollout/log_prob_diff_mean"] = (gap.sum() / batch.response_mask.sum().clamp(min=1)).item()
            metrics["rollout/log_prob_diff_max"] = gap.max().item()
        else:
            batch.old_log_prob = batch.rollout_log_prob
    if actor.ref_model is not None:
        with timer("ref"):
            batch.ref_log_prob = actor.compute_ref_log_prob(batch)
    return metrics


def train_epochs(actor, batch, timer: StepTimer) -> dict:
    """`actor.update(batch)`, with each mini-batch's optimizer step a `minibatch` trace span."""
    actor.check_update_batch(batch)
    history = []
    for epoch in range(actor.cfg.ppo_epochs):
        for i, rows in enumerate(actor.mini_batch_indices(batch)):
            history.append(timed_mini_batch(actor, batch.select(rows), timer, f"mini-batch {i}", epoch))
    return actor.end_update(history)


def timed_mini_batch(actor, mb, timer: StepTimer, name: str, epoch: int = 0) -> dict:
    """One optimizer step on `mb`, kept as a trace span."""
    start = time.perf_counter()
    stats = actor.train_mini_batch(mb)
    timer.span("minibatch", name, start, time.perf_counter(), {"epoch": epoch, "samples": len(mb)})
    return stats


def sync_weights(parts, step: int, timer: StepTimer) -> None:
    """Push the actor's weights to the rollout engine as policy version `step`."""
    with timer("update_weights"):
        parts.engine.update_weights(parts.actor.policy_state_dict(), version=step)


def staleness_metrics(completions: list, trainer_version: int) -> dict[str, float]:
    """async/staleness_*: how many policy versions behind the trainer each sample's policy was."""
    lags = [trainer_version - c.policy_version for c in completions] or [0]
    return {"async/staleness_mean": sum(lags) / len(lags), "async/staleness_max": max(lags)}


def drop_failed_groups(completions: list, results: list, n: int) -> tuple[list, list, int]:
    """Remove every group (n consecutive samples) holding a failed sample (result None)."""
    failed = {i // n for i, r in enumerate(results) if r is None}
    if not failed:
        return completions, results, 0
    keep = [i for i in range(len(completions)) if i // n not in failed]
    return [completions[i] for i in keep], [results[i] for i in keep], len(failed)


def batch_metrics(completions: list, scores, advantages) -> dict[str, float]:
    """critic/*, response_length/* and token counts of one batch."""
    resp = [len(c.token_ids) for c in completions]
    prompt = [len(c.prompt_ids) for c in completions]
    clipped = sum(c.finish_reason == "length" for c in completions)
    return {
        "critic/score/mean": scores.mean().item(),
        "critic/score/max": scores.max().item(),
        "critic/score/min": scores.min().item(),
        "critic/advantages/mean": advantages.mean().item(),
        "critic/advantages/max": advantages.max().item(),
        "critic/advantages/min": advantages.min().item(),
        "response_length/mean": sum(resp) / len(resp),
        "response_length/max": max(resp),
        "response_length/min": min(resp),
        "response_length/clip_ratio": clipped / len(resp),
        "prompt_length/mean": sum(prompt) / len(prompt),
        "perf/total_num_tokens": sum(resp) + sum(prompt),
        "perf/response_tokens": sum(resp),
        "batch/num_samples": len(completions),
    }
