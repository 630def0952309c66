"""Validation: one greedy (by default) answer per test prompt, scored by the run's reward."""

from __future__ import annotations

from rlrm.engine.scheduling.common import generate_groups, reward_samples, score_all
from rlrm.engine.scheduling.sync import sampling_params


async def validate(parts, examples: list, prompt_ids: list[list[int]]) -> dict[str, float]:
    """Accuracy and mean score on the test prompts.

    `val/accuracy` is the fraction of exactly right answers (the reward's `acc` extra when it
    reports one, else a score at the reward's full `score`).
    """
    if not examples:
        return {}
    profile = parts.profile
    completions = await generate_groups(
        parts.engine, prompt_ids, sampling_params(profile, validation=True), 1, profile.trainer.seed, step=-1
    )
    results = await score_all(parts.reward_fn, reward_samples(parts.tokenizer, examples, completions, 1))
    correct = [float(r.extra.get("acc", r.score >= profile.reward.score)) for r in results]
    return {
        "val/accuracy": sum(correct) / len(correct),
        "val/score_mean": sum(r.score for r in results) / len(results),
        "val/response_length": sum(len(c.token_ids) for c in completions) / len(completions),
    }
