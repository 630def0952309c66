"""Rule rewards: GSM8K answer matching as an async per-sample reward function.

With `reward.component_weights` naming them, the rule also reports its components: `correct` (1 when the
answer matches) and `format` (1 when an answer was found at all), for logging and algorithm.component_norm=gdpo.
"""

from __future__ import annotations

from rlrm.config.schema import RewardConfig
from rlrm.engine.rewards import gsm8k
from rlrm.engine.rewards.base import RewardFn, RewardResult, RewardSample
from rlrm.engine.rewards.components import COMPONENTS_KEY


def make_rule_reward(cfg: RewardConfig) -> RewardFn:
    """A reward function scoring with `gsm8k.compute_score` under the profile's settings."""

    async def rule_reward(sample: RewardSample) -> RewardResult:
        answer = gsm8k.extract_solution(sample.solution_str, method=cfg.method)
        score = gsm8k.compute_score(
            sample.solution_str, sample.ground_truth, method=cfg.method, format_score=cfg.format_score, score=cfg.score
        )
        correct = float(answer == sample.ground_truth)
        extra: dict[str, object] = {"acc": correct, "has_answer": answer is not None}
        if cfg.component_weights:
            offered = {"correct": correct, "format": float(answer is not None)}
            extra[COMPONENTS_KEY] = {name: offered[name] for name in cfg.component_weights}
        return RewardResult(score=score, extra=extra)

    return rule_reward
