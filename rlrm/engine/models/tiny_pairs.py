"""Labelled (problem, response, correct?) data for the tiny reward models, and how they are scored.

    train, heldout = reward_problems(seed)
    pairs = heldout_pairs(policy, tokenizer, heldout, random.Random(seed))
    report = auc_report(scores, pairs)   # {"auc": ..., "auc_policy_samples": ..., "auc_near_misses": ...}

Shared by the judge (`tiny_judge.py`) and the DisRM (`tiny_disrm.py`) recipes, so both report
their ROC AUC on the same kind of held-out set: the tiny policy's own sampled responses to unseen
problems, labelled by the GSM8K rule (what the reward model meets during RL), plus near misses
written in the policy's format (what it meets once the policy gets close).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, NamedTuple

from rlrm.config.schema import PROMPT_SUFFIX, SyntheticConfig
from rlrm.engine.data.synthetic import synthetic_splits
from rlrm.engine.models.sft import generate
from rlrm.engine.rewards.gsm8k import compute_score

if TYPE_CHECKING:
    from rlrm.engine.data.example import Example

MAX_VALUE = 20  # operands up to 20, as in the default synthetic data (tiny-rule uses up to 10)
DATA_SEED_BASE = 4242  # problems differ from the policy's warm start (987) and the profiles' (1234)
NEAR_MISS_OFFSETS = (-3, -2, -1, 1, 2, 3)
SAMPLE_TEMPERATURE = 1.0  # as the tiny-rule profile samples
SAMPLE_MAX_NEW_TOKENS = 20


class Labelled(NamedTuple):
    example: Example
    response: str
    label: int  # 1: the GSM8K rule scores it correct
    kind: str  # "policy", "correct", "odd" (right answer, wrong equation), "result", "final", "operand"


def reward_problems(seed: int, num_train: int, num_test: int) -> tuple[list, list]:
    """(train, held-out) problems; held-out has `num_test` with operands up to 20 and as many up to 10, none in train."""
    base = DATA_SEED_BASE + seed
    cfg = SyntheticConfig(num_train=num_train, num_test=num_test, seed=base, max_value=MAX_VALUE)
    train, test = synthetic_splits(cfg, PROMPT_SUFFIX)
    # Problems like the tiny-rule profile's; a few coincide with training problems and are left out.
    _, small = synthetic_splits(
        SyntheticConfig(num_train=1, num_test=num_test, seed=base + 500, max_value=10), PROMPT_SUFFIX
    )
    seen = {ex.extra_info["question"] for ex in train + test}
    return train, test + [ex for ex in small if ex.extra_info["question"] not in seen]


def _equation(ex) -> str:
    return ex.extra_info["solution"].split(" = ")[0]


def _off_by_a_little(value: int, rng: random.Random) -> int:
    offset = rng.choice(NEAR_MISS_OFFSETS)
    return value + offset if value + offset >= 0 else value - offset


def right_response(ex, rng: random.Random, odd_share: float = 0.2) -> Labelled:
    """A correct response: the worked solution, or (`odd_share`) a wrong equation result with the right final answer."""
    if rng.random() >= odd_share:
        return Labelled(ex, ex.extra_info["solution"], 1, "correct")
    # The rule reward reads only "#### N", so this counts as correct; the policy writes such answers.
    return Labelled(
        ex, f"{_equation(ex)} = {_off_by_a_little(int(ex.ground_truth), rng)}\n#### {ex.ground_truth}", 1, "odd"
    )


def wrong_response(ex, rng: random.Random) -> Labelled:
    """A near miss in the policy's format.

    "result" (70%): a plausible wrong sum, consistently carried to the answer ("12 + 7 = 20\\n#### 20"),
    the policy's commonest error; "final" (15%): right equation, wrong final answer; "operand" (15%):
    a number misread from the problem ("12 + 8 = 20\\n#### 20").
    """
    truth, equation, draw = int(ex.ground_truth), _equation(ex), rng.random()
    if draw < 0.7:
        wrong = _off_by_a_little(truth, rng)
        return Labelled(ex, f"{equation} = {wrong}\n#### {wrong}", 0, "result")
    if draw < 0.85:
        return Labelled(ex, f"{equation} = {truth}\n#### {_off_by_a_little(truth, rng)}", 0, "final")
    parts = equation.split(" ")
    at = rng.choice([i for i, p in enumerate(parts) if p.isdigit()])
    parts[at] = str(max(0, int(parts[at]) + rng.choice((-2, -1, 1, 2))))
    value = _evaluate(parts)
    return Labelled(ex, f"{' '.join(parts)} = {value}\n#### {value}", int(value == truth), "operand")


def _evaluate(parts: list[str]) -> int:
    """Value of "a + b - c" written as tokens (the synthetic task's + and - only)."""
    total = int(parts[0])
    for op, number in zip(parts[1::2], parts[2::2]):
        total = total + int(number) if op == "+" else total - int(number)
    return total


def sample_policy(model, tokenizer, examples: list, per_problem: int, batch: int = 64) -> list[Labelled]:
    """The policy's sampled responses (temperature 1, as in RL), labelled by the strict GSM8K rule."""
    out = []
    for start in range(0, len(examples), batch):
        chunk = examples[start : start + batch]
        generated, width = generate(
            model,
            tokenizer,
            [ex.prompt for ex in chunk],
            repeat=per_problem,
            do_sample=True,
            temperature=SAMPLE_TEMPERATURE,
            top_k=0,
            top_p=1.0,
            max_new_tokens=SAMPLE_MAX_NEW_TOKENS,
        )
        texts = tokenizer.batch_decode(generated[:, width:], skip_special_tokens=True)
        for i, text in enumerate(texts):
            ex = chunk[i // per_problem]
            out.append(Labelled(ex, text, int(compute_score(text, ex.ground_truth) == 1.0), "policy"))
    return out


def heldout_pairs(policy, tokenizer, problems: list, rng: random.Random, per_problem: int = 2) -> list[Labelled]:
    """The policy's samples for every held-out problem, then one near miss or correct answer (50/50) each."""
    pairs = sample_policy(policy, tokenizer, problems, per_problem)
    return pairs + [right_response(ex, rng) if i % 2 == 0 else wrong_response(ex, rng) for i, ex in enumerate(problems)]


def roc_auc(scores: list[float], labels: list[int]) -> float:
    """Probability that a random positive scores above a random negative (ties count half)."""
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    # Rank-sum (Mann-Whitney U) with average ranks for ties: O(n log n), exact.
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    pos = sum(1 for y in labels if y == 1)
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    rank_sum = sum(r for r, y in zip(ranks, labels) if y == 1)
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


def auc_report(scores: list[float], pairs: list[Labelled]) -> dict[str, float]:
    """AUC on all held-out pairs, on the policy's samples alone, and on the written near misses alone."""

    def auc_of(keep) -> float:
        idx = [i for i, p in enumerate(pairs) if keep(p)]
        return roc_auc([scores[i] for i in idx], [pairs[i].label for i in idx])

    answered = [p.label for p in pairs if p.kind == "policy"]
    return {
        "auc": auc_of(lambda p: True),
        "auc_policy_samples": auc_of(lambda p: p.kind == "policy"),
        "auc_near_misses": auc_of(lambda p: p.kind != "policy"),
        "policy_sample_accuracy": sum(answered) / max(1, len(answered)),  # how often the policy was right
        "heldout_pairs": len(pairs),
    }
