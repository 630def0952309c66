"""Canary verdicts: which known items the reward now gets wrong, and how far their scores moved since the first check.

    items = [CanaryItem("reference#0", must_reward=True), CanaryItem("key-colon#0", must_reward=False)]
    finding = judge_canaries(items, scores=[0.0, 1.0], baseline=[1.0, 0.0], threshold=0.5, max_drift=0.2)
    finding.flips        # ["reference#0", "key-colon#0"]: the reference is no longer rewarded, the attack is
    finding.drift        # 1.0: mean |score - first score| over the items scored both times
    finding.flagged      # True: a flip, or drift above max_drift

Pure: the scores come from rlrm/engine/canaries.py, which sends the items through the run's reward path. A score of
None is an item whose reward failed after its retries: it is counted in `failed`, never read as a verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

SHOWN_FLIPS = 4  # flips named in the one-line detail; the count covers all of them


@dataclass(frozen=True)
class CanaryItem:
    name: str  # "<attack>#<problem>", e.g. "reference#0", "key-colon#1"
    must_reward: bool  # a reference solution: True; an attack: False


@dataclass
class CanaryFinding:
    flips: list[str] = field(default_factory=list)  # items on the wrong side of the threshold
    flip_scores: list[float] = field(default_factory=list)
    drift: float = math.nan  # mean |score - baseline| (nan: nothing scored both times)
    failed: int = 0  # items whose reward failed (no verdict)
    scored: int = 0
    max_drift: float = math.inf
    threshold: float = 0.5

    @property
    def drifted(self) -> bool:
        return not math.isnan(self.drift) and self.drift > self.max_drift

    @property
    def flagged(self) -> bool:
        return bool(self.flips) or self.drifted

    def metrics(self) -> dict[str, float]:
        return {
            "guard/canary_flips": float(len(self.flips)),
            "guard/canary_drift": self.drift,
            "guard/canary_failed": float(self.failed),
        }

    @property
    def detail(self) -> str:
        """One line: the flips (a few named, with their scores) and the drift."""
        parts = []
        if self.flips:
            named = ", ".join(
                f"{name} scored {score:.3g} ({'not rewarded, must be' if name.startswith('reference') else 'rewarded, must not be'})"
                for name, score in zip(self.flips[:SHOWN_FLIPS], self.flip_scores)
            )
            more = f" and {len(self.flips) - SHOWN_FLIPS} more" if len(self.flips) > SHOWN_FLIPS else ""
            parts.append(
                f"{len(self.flips)} of {self.scored} canaries flipped at threshold {self.threshold:g}: {named}{more}"
            )
        if self.drifted:
            parts.append(
                f"canary scores drifted {self.drift:.3g} from the first check (max_canary_drift {self.max_drift:g})"
            )
        return "; ".join(parts) or "canaries hold"


def judge_canaries(
    items: list[CanaryItem],
    scores: list[float | None],
    baseline: list[float | None] | None,
    threshold: float,
    max_drift: float,
) -> CanaryFinding:
    """The flips among `scores` (score >= threshold is "rewarded") and their mean drift from `baseline`.

    Args:
        items: the canaries, in the order of `scores` and `baseline`.
        scores: this check's scores; None where the reward failed.
        baseline: the first check's scores (None: this is the first check, drift is 0 where scored).
        threshold: the score at and above which the reward says "correct".
        max_drift: the mean absolute change above which the scores count as drifted.
    """
    if len(scores) != len(items) or (baseline is not None and len(baseline) != len(items)):
        raise ValueError(f"{len(items)} canaries, {len(scores)} scores, {len(baseline or [])} baseline scores")
    finding = CanaryFinding(max_drift=max_drift, threshold=threshold)
    moved = []
    for i, (item, score) in enumerate(zip(items, scores)):
        if score is None:
            finding.failed += 1
            continue
        finding.scored += 1
        if (score >= threshold) != item.must_reward:
            finding.flips.append(item.name)
            finding.flip_scores.append(score)
        first = score if baseline is None else baseline[i]
        if first is not None:
            moved.append(abs(score - first))
    finding.drift = sum(moved) / len(moved) if moved else math.nan
    return finding
