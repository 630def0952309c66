"""Rule rewards: answer matching (`reward.rule`: GSM8K's `#### N` or MATH's `\\boxed{}`) as an async per-sample
reward function.

With `reward.component_weights` naming them, the rule also reports its components: `correct` (1 when the
answer matches) and `format` (1 when an answer was found at all), for logging and algorithm.component_norm=gdpo.
"""

from __future__ import annotations

from rlrm.config.schema import RewardConfig
from rlrm.engine.rewards.answers import check_answer, rule_score
from rlrm.engine.rewards.base import RewardFn, RewardResult, RewardSample
from rlrm.engine.rewards.components import COMPONENTS_KEY


def make_rule_reward(cfg: RewardConfig) -> RewardFn:
    """A reward function scoring answers by `reward.rule`: reward.score when right, reward.format_score when wrong,
    0 when none was found."""

    async def rule_reward(sample: RewardSample) -> RewardResult:
        answer, right = check_answer(cfg, sample.solution_str, sample.ground_truth)
        score = rule_score(cfg, answer, right)
        correct = float(right)
        extra: dict[str, object] = {"acc": correct, "has_answer": answer is not None}
        if cfg.component_weights:
            offered = {"correct": correct, "format": float(answer is not None)}
            extra[COMPONENTS_KEY] = {name: offered[name] for name in cfg.component_weights}
        return RewardResult(score=score, extra=extra)

    return rule_reward
