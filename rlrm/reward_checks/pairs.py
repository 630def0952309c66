"""`rlrm eval rm`: pairwise accuracy of a profile's reward on chosen/rejected pairs.

    pairs, skipped = read_pairs("pairs.jsonl")     # RewardBench's jsonl shape
    scored = score_pairs(profile, pairs)           # through the trainer's reward loop and servers
    table = accuracy_table(scored)                 # per subset and overall, Wilson 95% interval

A row holds `prompt` (a string, or chat messages), `chosen` and `rejected` (responses) and optionally
`subset`, `id` and `ground_truth` (rlrm's addition: the reference answer for the rule and for judges
whose template uses {reference}). A pair is won when chosen scores strictly above rejected; a tie
(equal scores: common for a judge with two verdicts) is not a win and is counted on its own; a pair
with a failed score on either side is counted as failed and left out of the accuracy; when every pair
failed (a judge that is down) there is no accuracy, and scoring raises naming the first error. A pair
whose chosen and rejected are the same text says nothing: it is counted, skipped and warned about.

The interval is Wilson's score interval of the won share (rlrm/stats.py), not a bootstrap: a bootstrap of
n pairs all won resamples nothing but wins and gives 1.000-1.000, while Wilson gives 1 of 1 won
0.207-1.000 and 192 of 192 0.980-1.000.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardResult, RewardSample
from rlrm.errors import DataError, RlrmError, clipped
from rlrm.reward_checks.samples import messages_of, read_jsonl
from rlrm.reward_checks.scoring import score_samples
from rlrm.stats import wilson_interval

PAIR_FIELDS = ("prompt", "chosen", "rejected")
OVERALL = "overall"


class PairsError(RlrmError):
    """No pair could be scored: there is no accuracy to give."""


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
    error: str = ""  # why the first of its failed scores failed ("": both scored)


def read_pairs(path, limit: int | None = None) -> tuple[list[Pair], list[str]]:
    """(pairs to score, ids of the pairs skipped because chosen == rejected), of the file's first `limit` rows."""
    pairs, identical = [], []
    for i, (lineno, row) in enumerate(read_jsonl(path, "--pairs")[:limit]):
        where = f"{path} row {lineno}"
        missing = [f for f in PAIR_FIELDS if row.get(f) is None]
        if missing:
            raise DataError(f"{where}: missing field(s) {', '.join(missing)} (each row needs {', '.join(PAIR_FIELDS)})")
        for key in ("chosen", "rejected"):
            if not isinstance(row[key], str):
                raise DataError(f"{where}: {key} must be text, got {type(row[key]).__name__}")
        pair = Pair(
            id=str(row.get("id", i)),
            subset=_subset(row.get("subset"), where),
            prompt=messages_of(row["prompt"], where),
            chosen=row["chosen"],
            rejected=row["rejected"],
            ground_truth="" if row.get("ground_truth") is None else str(row["ground_truth"]),  # 0 is an answer
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
    scores, errors = zip(*map(_score_and_error, results)) if results else ((), ())
    cut = [int(r is not None and bool(r.extra.get("disrm_truncated"))) for r in results]
    scored = [
        ScoredPair(p, scores[2 * i], scores[2 * i + 1], cut[2 * i] + cut[2 * i + 1], errors[2 * i] or errors[2 * i + 1])
        for i, p in enumerate(pairs)
    ]
    if scored and all(s.error for s in scored):
        raise PairsError(
            f"every one of {len(scored)} pairs failed to score with reward.kind={reward.kind}, so there is no "
            f"accuracy; the first error (pair {scored[0].pair.id}): {clipped(scored[0].error, 200)}"
        )
    return scored


def _score_and_error(result: RewardResult | None) -> tuple[float, str]:
    """(the score, "") or (NaN, why it failed)."""
    if result is None:
        return math.nan, "the reward loop dropped it"
    if result.extra.get("reward_failed"):
        return math.nan, str(result.extra.get("reward_error") or "unknown")
    score = float(result.score)
    return (score, "") if math.isfinite(score) else (math.nan, f"a non-finite score ({score})")


def accuracy_table(scored: list[ScoredPair]) -> list[dict]:
    """One row per subset (sorted) and an overall row: pairs, won, ties, lost, failed, accuracy (won / scored;
    NaN when none of them was scored) and its Wilson 95% interval (`ci95_low`, `ci95_high`)."""
    subsets = sorted({s.pair.subset for s in scored})
    rows = []
    for name in subsets + [OVERALL]:
        part = [s for s in scored if name == OVERALL or s.pair.subset == name]
        ok = [s for s in part if math.isfinite(s.chosen) and math.isfinite(s.rejected)]
        won = sum(1 for s in ok if s.chosen > s.rejected)
        ties = sum(1 for s in ok if s.chosen == s.rejected)
        low, high = wilson_interval(won, len(ok))
        rows.append(
            {
                "subset": name,
                "pairs": len(part),
                "won": won,
                "ties": ties,
                "lost": len(ok) - won - ties,
                "failed": len(part) - len(ok),
                "accuracy": won / len(ok) if ok else math.nan,
                "ci95_low": low,
                "ci95_high": high,
            }
        )
    return rows


def _subset(value, where: str) -> str:
    """A row's subset ("all" when it names none; a subset named 0 is "0"); the overall row's name is refused."""
    name = "all" if value in (None, "") else str(value)
    if name == OVERALL:
        raise DataError(f"{where}: subset {OVERALL!r} is the name of the row over every pair; call it otherwise")
    return name
