"""Labelled (problem, response, correct?) pairs for the tiny reward models.

Wrong responses are near misses in the policy's own format ("12 + 7 = 20\\n#### 20"): the kind of
error the tiny policy makes, so a reward model trained on them judges what RL will show it.
"""

from __future__ import annotations

import random

from rlrm.config.schema import PROMPT_SUFFIX, SyntheticConfig


def labelled_pairs(seed: int, num_train: int, num_test: int) -> tuple[list, list]:
    """(train, test) lists of (Example, response, label) with labels balanced 50/50."""
    from rlrm.engine.data.synthetic import synthetic_splits

    cfg = SyntheticConfig(num_train=num_train, num_test=num_test, seed=4242 + seed)
    train, test = synthetic_splits(cfg, PROMPT_SUFFIX)
    rng = random.Random(seed)
    return [_pair(ex, i % 2 == 0, rng) for i, ex in enumerate(train)], [_pair(ex, i % 2 == 0, rng) for i, ex in enumerate(test)]


def _pair(ex, correct: bool, rng: random.Random):
    solution = ex.extra_info["solution"]
    if correct:
        return ex, solution, 1
    equation = solution.split(" = ")[0]
    truth = int(ex.ground_truth)
    wrong = truth + rng.choice([d for d in (-3, -2, -1, 1, 2, 3) if truth + d >= 0])
    return ex, f"{equation} = {wrong}\n#### {wrong}", 0


def roc_auc(scores: list[float], labels: list[int]) -> float:
    """Probability that a random positive scores above a random negative (ties count half)."""
    pos = [s for s, y in zip(scores, labels) if y == 1]
    neg = [s for s, y in zip(scores, labels) if y == 0]
    if not pos or not neg:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))
