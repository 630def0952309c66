"""Which rule checks an answer against the ground truth (`reward.rule`): GSM8K's `#### N` or MATH's `\\boxed{}`.

    answer, correct = check_answer(cfg, solution_str, ground_truth)

The rule reward, held-out accuracy (`val/*`), a model reward's rule agreement and `rlrm inspect reward` check
answers here, so they agree on what a right answer is.
"""

from __future__ import annotations

from rlrm.config.reward import RewardConfig
from rlrm.engine import math_answer
from rlrm.engine.rewards import gsm8k


def check_answer(cfg: RewardConfig, solution_str: str, ground_truth: str) -> tuple[str | None, bool]:
    """(the answer found in the response or None, whether it is the ground truth)."""
    if cfg.rule == "math":
        answer = math_answer.extract_solution(solution_str)
        return answer, answer is not None and math_answer.is_equiv(answer, math_answer.truth_of(ground_truth))
    answer = gsm8k.extract_solution(solution_str, method=cfg.method)
    return answer, answer is not None and answer == ground_truth


def rule_score(cfg: RewardConfig, answer: str | None, correct: bool) -> float:
    """The rule reward's score of a checked answer: reward.score when right, reward.format_score when wrong, 0 when
    no answer was found."""
    if answer is None:
        return 0.0
    return cfg.score if correct else cfg.format_score
