"""`rlrm eval rm`: pairwise accuracy of a profile's reward on chosen/rejected pairs.

    pairs, skipped = read_pairs("pairs.jsonl")     # RewardBench's jsonl shape
    scored = score_pairs(profile, pairs)           # through the trainer's reward loop and servers
    table = accuracy_table(scored, seed=0)         # per subset and overall, bootstrap 95% interval

A row holds `prompt` (a string, or chat messages), `chosen` and `rejected` (responses) and optionally
`subset`, `id` and `ground_truth` (rlrm's addition: the reference answer for the rule and for judges
whose template uses {reference}). A pair is won when chosen scores strictly above rejected; a tie
(equal scores: common for a judge with two verdicts) is not a win and is counted on its own; a pair
with a failed score on either side is counted as failed and left out of the accuracy. A pair whose
chosen and rejected are the same text says nothing: it is counted, skipped and warned about.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardSample
from rlrm.errors import DataError
from rlrm.reward_checks.samples import messages_of, read_jsonl
from rlrm.reward_checks.scoring import score_samples

PAIR_FIELDS = ("prompt", "chosen", "rejected")
BOOTSTRAP = 2000
OVERALL = "overall"


@dataclass(frozen=True)
class Pair:
    id: str
    subset: str
    prompt: list[dict]
    chosen: str
    rejected: str
    ground_truth: str = ""


@dataclass
class ScoredPair:
    pair: Pair
    chosen: float  # NaN: the reward failed
    rejected: float
    truncated: int = 0  # of its two conversations, how many the DisRM cut to reward.disrm.max_length


def read_pairs(path) -> tuple[list[Pair], list[str]]:
    """(pairs to score, ids of the pairs skipped because chosen == rejected)."""
    pairs, identical = [], []
    for i, (lineno, row) in enumerate(read_jsonl(path, "--pairs")):
        where = f"{path} row {lineno}"
        missing = [f for f in PAIR_FIELDS if row.get(f) is None]
        if missing:
            raise DataError(f"{where}: missing field(s) {', '.join(missing)} (each row needs {', '.join(PAIR_FIELDS)})")
        for key in ("chosen", "rejected"):
            if not isinstance(row[key], str):
                raise DataError(f"{where}: {key} must be text, got {type(row[key]).__name__}")
        pair = Pair(
            id=str(row.get("id", i)),
            subset=str(row.get("subset") or "all"),
            prompt=messages_of(row["prompt"], where),
            chosen=row["chosen"],
            rejected=row["rejected"],
            ground_truth=str(row.get("ground_truth") or ""),
        )
        if pair.chosen == pair.rejected:
            identical.append(pair.id)
        else:
            pairs.append(pair)
    if not pairs:
        raise DataError(f"{path}: no pair left to score ({len(identical)} had identical chosen and rejected)")
    return pairs, identical


def score_pairs(reward: RewardConfig, pairs: list[Pair]) -> list[ScoredPair]:
    """Every chosen and rejected response scored at once by the reward loop (its workers and concurrency)."""
    samples = []
    for i, p in enumerate(pairs):
        for j, response in enumerate((p.chosen, p.rejected)):
            samples.append(
                RewardSample(
                    uid=p.id,
                    index=2 * i + j,
                    data_source="pairs",
                    prompt=p.prompt,
                    solution_str=response,
                    ground_truth=p.ground_truth,
                    extra_info={"question": p.prompt[-1]["content"]},
                )
            )
    results = score_samples(reward, samples).results
    scores = [math.nan if r is None or r.extra.get("reward_failed") else float(r.score) for r in results]
    cut = [int(r is not None and bool(r.extra.get("disrm_truncated"))) for r in results]
    return [ScoredPair(p, scores[2 * i], scores[2 * i + 1], cut[2 * i] + cut[2 * i + 1]) for i, p in enumerate(pairs)]


def bootstrap_interval(wins: np.ndarray, rng: np.random.Generator, resamples: int = BOOTSTRAP) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of the mean of `wins` (1 won, 0 not)."""
    if len(wins) == 0:
        return math.nan, math.nan
    means = wins[rng.integers(0, len(wins), size=(resamples, len(wins)))].mean(axis=1)  # [resamples]
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def accuracy_table(scored: list[ScoredPair], seed: int = 0, resamples: int = BOOTSTRAP) -> list[dict]:
    """One row per subset (sorted) and an overall row: pairs, won, ties, failed, accuracy and its interval."""
    rng = np.random.default_rng(seed)
    subsets = sorted({s.pair.subset for s in scored})
    rows = []
    for name in subsets + [OVERALL]:
        part = [s for s in scored if name == OVERALL or s.pair.subset == name]
        ok = [s for s in part if math.isfinite(s.chosen) and math.isfinite(s.rejected)]
        wins = np.array([float(s.chosen > s.rejected) for s in ok])
        ties = sum(1 for s in ok if s.chosen == s.rejected)
        low, high = bootstrap_interval(wins, rng, resamples)
        rows.append(
            {
                "subset": name,
                "pairs": len(part),
                "won": int(wins.sum()),
                "ties": ties,
                "lost": len(ok) - int(wins.sum()) - ties,
                "failed": len(part) - len(ok),
                "accuracy": float(wins.mean()) if len(ok) else math.nan,
                "ci95_low": low,
                "ci95_high": high,
            }
        )
    return rows
