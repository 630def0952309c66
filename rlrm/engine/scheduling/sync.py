"""Sync mode: generate every sample, then score every sample, then train. Nothing overlaps."""

from __future__ import annotations

from rlrm.engine.metrics.timing import StepTimer
from rlrm.engine.rollout.base import SamplingParams
from rlrm.engine.scheduling.common import generate_groups, reward_samples, score_samples


def sampling_params(profile, validation: bool = False) -> SamplingParams:
    """The profile's sampling settings (greedy-by-default ones at validation)."""
    r = profile.rollout
    if validation:
        return SamplingParams(temperature=r.val_temperature, top_p=1.0, top_k=-1, max_new_tokens=r.max_new_tokens)
    return SamplingParams(temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, max_new_tokens=r.max_new_tokens)


async def sync_step(parts, examples: list, prompt_ids: list[list[int]], step: int, timer: StepTimer) -> dict:
    """One GRPO step in sync mode; returns the step's metrics.

    The trainer waits through generation (`timing_s/gen`, lane gen_wait) and scoring
    (`timing_s/reward`, lane reward_wait), as it does in every mode.
    """
    from rlrm.engine.update import staleness_metrics, update_policy

    profile = parts.profile
    n = profile.rollout.n
    with timer("gen", lane="gen_wait"):
        completions = await generate_groups(
            parts.engine, prompt_ids, sampling_params(profile), n, profile.trainer.seed, step, timer
        )
    samples = reward_samples(parts.tokenizer, examples, completions, n)
    colocated = profile.reward.placement == "colocated"  # the reward model takes its turn on the device
    with timer("reward", lane="reward_wait"):
        if colocated:
            with timer("reward_wake", lane="reward_wait"):
                await parts.reward.wake()
        results = await score_samples(parts.reward.loop, samples, timer, step)
        if colocated:
            with timer("reward_sleep", lane="reward_wait"):
                await parts.reward.sleep()
    metrics = update_policy(parts, completions, results, step, timer, parts.reward.loop.take_metrics())
    return {**metrics, **staleness_metrics(completions, step - 1), "_samples": list(zip(samples, results, completions))}
