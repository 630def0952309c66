"""Held-out accuracy (the `val/*` metrics, `trainer.val_every`): one greedy (by default) answer per test
prompt, checked against the ground truth.

Accuracy is the rule's exact match (`reward.rule`: GSM8K's `#### N` as `reward.method` finds it, or MATH's last
`\\boxed{}`) whatever reward the run trains with, so runs with a judge, a DisRM or a rule are compared on the same
footing (and no judge time is spent here).
"""

from __future__ import annotations

from rlrm.config.schema import Profile
from rlrm.engine.rewards.rule import make_rule_reward
from rlrm.engine.scheduling.requests import generate_groups, reward_samples, sampling_params


async def evaluate_held_out(
    engine, tokenizer, profile: Profile, examples: list, prompt_ids: list[list[int]]
) -> dict[str, float]:
    """`val/accuracy` (exact answers), `val/format_rate` (answers found at all), mean response length."""
    if not examples:
        return {}
    completions = await generate_groups(
        engine, prompt_ids, sampling_params(profile, validation=True), 1, profile.trainer.seed, step=-1
    )
    rule = make_rule_reward(profile.reward)
    results = [await rule(s) for s in reward_samples(tokenizer, examples, completions, 1)]
    correct = [r.extra["acc"] for r in results]
    return {
        "val/accuracy": sum(correct) / len(correct),
        "val/format_rate": sum(r.extra["has_answer"] for r in results) / len(results),
        "val/response_length": sum(len(c.token_ids) for c in completions) / len(completions),
    }
