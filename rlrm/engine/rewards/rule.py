"""Rule rewards: GSM8K answer matching as an async per-sample reward function."""

from __future__ import annotations

from rlrm.config.schema import RewardConfig
from rlrm.engine.rewards import gsm8k
from rlrm.engine.rewards.base import RewardFn, RewardResult, RewardSample


def make_rule_reward(cfg: RewardConfig) -> RewardFn:
    """A reward function scoring with `gsm8k.compute_score` under the profile's settings."""

    async def rule_reward(sample: RewardSample) -> RewardResult:
        answer = gsm8k.extract_solution(sample.solution_str, method=cfg.method)
        score = gsm8k.compute_score(
            sample.solution_str, sample.ground_truth, method=cfg.method, format_score=cfg.format_score, score=cfg.score
        )
        return RewardResult(
            score=score, extra={"acc": float(answer == sample.ground_truth), "has_answer": answer is not None}
        )

    return rule_reward
