"""From scored rollouts to a policy update: advantages, old/ref log-probs, actor step, weight sync.

Synchronous on purpose: once the scores of a batch are in, nothing else of this step needs the
event loop, and an interrupt can only land before the update or after it, never inside.
"""

from __future__ import annotations

from rlrm.engine.metrics.timing import StepTimer


def update_policy(parts, completions: list, results: list, step: int, timer: StepTimer) -> dict:
    """Train on one step's scored samples and push the new weights to the rollout engine.

    Args:
        parts: the run's Components.
        completions: n per prompt, prompt-major.
        results: one RewardResult per completion.
        step: the step number (becomes the engine's policy version).
        timer: collects `timing_s/*`.

    Returns:
        Metrics of the update and of the batch.
    """
    import torch

    from rlrm.engine.actor.batch import collate
    from rlrm.engine.algorithms import grpo_advantages

    profile = parts.profile
    n = profile.rollout.n
    actor = parts.actor
    completions, results, dropped_groups = drop_failed_groups(completions, results, n)
    reward_metrics = parts.reward.loop.take_metrics(dropped_groups)
    if not completions:
        return {**reward_metrics, "batch/num_samples": 0}  # every group dropped: nothing to learn from
    scores = torch.tensor([r.score for r in results], dtype=torch.float32)  # [B]
    group_ids = torch.arange(len(completions)) // n  # [B]
    with timer("adv"):
        advantages = grpo_advantages(
            scores, group_ids, eps=profile.algorithm.adv_eps, norm_by_std=profile.algorithm.norm_adv_by_std
        )
        batch = collate(completions, parts.tokenizer.pad_token_id)
        batch.scores, batch.advantages, batch.group_ids = scores, advantages, group_ids
        batch = batch.to(parts.device) if hasattr(batch, "to") else batch
    with timer("old_log_prob"):
        if profile.actor.recompute_old_log_prob:
            batch.old_log_prob = actor.compute_old_log_prob(batch)
        else:
            batch.old_log_prob = batch.rollout_log_prob
    # How far the rollout engine's log-probs are from the actor's (0 up to float noise when in sync).
    gap = (batch.old_log_prob - batch.rollout_log_prob).abs() * batch.response_mask
    rollout_gap = {
        "rollout/log_prob_diff_mean": (gap.sum() / batch.response_mask.sum().clamp(min=1)).item(),
        "rollout/log_prob_diff_max": gap.max().item(),
    }
    if actor.ref_model is not None:
        with timer("ref"):
            batch.ref_log_prob = actor.compute_ref_log_prob(batch)
    with timer("update_actor"):
        metrics = actor.update(batch)
    with timer("update_weights"):
        parts.engine.update_weights(actor.policy_state_dict(), version=step)
    metrics.update(rollout_gap)
    metrics.update(reward_metrics)
    metrics.update(batch_metrics(completions, scores, advantages))
    return metrics


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
