"""How often two reward contracts give the same verdict on the same samples: pure functions of two score
vectors, no models.

    agreement = verdict_agreement(a_scores, b_scores)
    agreement["exact"]                 # share of samples both sides scored that got the same score
    agreement["binary"]["kappa"]       # Cohen's kappa, when every score is one of two values (a judge's yes / no)
    agreement["binary"]["confusion"]   # [[a low & b low, a low & b high], [a high & b low, a high & b high]]

A GenRM judge that ends with "Score: 10" or "Score: 0" gives two values (1.0 and 0.0 after max_score): the
score differences of rlrm.parity.compare then count disagreements, and what a user reads is how often the two
judges agree and how much of that agreement chance alone would give (kappa: 1 is perfect agreement, 0 what two
independent judges with the same yes-rates would reach). Samples that either side could not score (NaN) are
left out here; they are counted per side elsewhere.
"""

from __future__ import annotations

import math

import numpy as np


def verdict_agreement(a, b) -> dict:
    """Exact agreement over the samples both sides scored, and the binary statistics when they apply.

    Args:
        a: [B] side A's scores (NaN where it gave none).
        b: [B] side B's scores.

    Returns:
        {"compared": samples both sides scored, "exact": share of them with equal scores (NaN when none),
         "binary": `binary_agreement(...)` or None when the scores take more than two values}.
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"lengths differ: a {len(a)}, b {len(b)}")
    both = np.isfinite(a) & np.isfinite(b)
    a, b = a[both], b[both]
    levels = np.unique(np.concatenate([a, b]))
    return {
        "compared": int(both.sum()),
        "exact": float((a == b).mean()) if len(a) else math.nan,
        "binary": binary_agreement(a >= levels[-1], b >= levels[-1], levels) if 1 <= len(levels) <= 2 else None,
    }


def binary_agreement(a_high, b_high, levels) -> dict:
    """Agreement of two yes/no verdict vectors (True: the higher of the two score `levels`).

    Returns:
        rate (share of equal verdicts), kappa (Cohen's: (rate - chance) / (1 - chance), chance being
        P(a high) P(b high) + P(a low) P(b low); NaN when chance is 1, i.e. both sides give one verdict only),
        confusion ([[a low & b low, a low & b high], [a high & b low, a high & b high]]), a_high_rate, b_high_rate
        and levels (the low and high score; one value when every score is the same).
    """
    a_high, b_high = np.asarray(a_high, bool), np.asarray(b_high, bool)
    n = len(a_high)
    confusion = [
        [int((~a_high & ~b_high).sum()), int((~a_high & b_high).sum())],
        [int((a_high & ~b_high).sum()), int((a_high & b_high).sum())],
    ]
    if n == 0:
        nan = math.nan
        return {"rate": nan, "kappa": nan, "confusion": confusion, "a_high_rate": nan, "b_high_rate": nan,
                "levels": [float(v) for v in levels]}  # fmt: skip
    rate = (confusion[0][0] + confusion[1][1]) / n
    pa, pb = float(a_high.mean()), float(b_high.mean())
    chance = pa * pb + (1 - pa) * (1 - pb)
    kappa = (rate - chance) / (1 - chance) if chance < 1 else math.nan
    return {
        "rate": rate,
        "kappa": kappa,
        "confusion": confusion,
        "a_high_rate": pa,
        "b_high_rate": pb,
        "levels": [float(v) for v in levels],
    }
