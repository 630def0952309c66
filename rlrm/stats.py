"""Summary statistics shared by the reward loop, the benchmark tables and the parity report. Pure.

quantile([3.0, 1.0, 2.0, 4.0], 0.5)   # 2.5: linear interpolation, as numpy.quantile by default
spread([1.71, 1.80, 1.77, 1.83, 1.75])  # median and interval over a benchmark's repeats (below)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable


def quantile(values: Iterable[float], q: float) -> float:
    """The `q` quantile of `values` by linear interpolation between the closest ranks.

    The same number as `numpy.quantile(values, q)` (method "linear", numpy's default, type 7 of
    Hyndman & Fan), computed the way numpy computes it, so the two agree to the last bit.

    Args:
        values: finite numbers, in any order.
        q: in [0, 1].

    Raises:
        ValueError: `values` is empty or `q` is outside [0, 1].
    """
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile q must be in [0, 1], got {q}")
    position = (len(ordered) - 1) * q
    below = math.floor(position)
    low, high = ordered[below], ordered[min(below + 1, len(ordered) - 1)]
    weight = position - below
    # numpy's lerp: from the nearer end, so that weight 1 gives `high` exactly
    return high - (high - low) * (1.0 - weight) if weight >= 0.5 else low + (high - low) * weight


# How sure a benchmark's number is: the median over repeats and an interval around it.
#     spread([1.71, 1.80, 1.77, 1.83, 1.75])   # Spread(median=1.77, lo=1.71, hi=1.83, method="bootstrap95")
#
# - 5 repeats or more: a percentile bootstrap 95% interval of the median (2,000 resamples, seeded, so the
#   same numbers give the same interval every time);
# - 2 to 4 repeats: min-max (a bootstrap of so few values is mostly the values themselves);
# - 1 repeat: no interval (`lo`/`hi` are NaN, method "unknown").
#
# A mode is "within noise" of sync when its speedup interval holds 1.0: the repeats cannot tell it
# apart from sync's throughput.

BOOTSTRAP_FROM = 5  # repeats from which the interval is a bootstrap; below it min-max
RESAMPLES = 2000


@dataclass(frozen=True)
class Spread:
    median: float
    lo: float
    hi: float
    method: str  # "bootstrap95" | "min-max" | "unknown"

    def holds(self, value: float) -> bool:
        """`value` lies inside the interval (False when there is none)."""
        return self.method != "unknown" and self.lo <= value <= self.hi


def spread(values: list[float], seed: int = 0) -> Spread:
    """Median and interval of the finite numbers in `values` (NaN everywhere when there are none)."""
    finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not finite:
        return Spread(math.nan, math.nan, math.nan, "unknown")
    median = quantile(finite, 0.5)
    if len(finite) == 1:
        return Spread(median, math.nan, math.nan, "unknown")
    if len(finite) < BOOTSTRAP_FROM:
        return Spread(median, min(finite), max(finite), "min-max")
    import numpy as np

    rng = np.random.default_rng(seed)
    draws = rng.choice(np.asarray(finite), size=(RESAMPLES, len(finite)), replace=True)
    medians = np.median(draws, axis=1)
    lo, hi = np.quantile(medians, [0.025, 0.975])
    return Spread(median, float(lo), float(hi), "bootstrap95")


def within_noise(speedup: Spread) -> bool:
    """The speedup's interval holds 1.0: the mode cannot be told apart from sync."""
    return speedup.holds(1.0)


Z95 = 1.959963984540054  # the standard normal's 97.5% quantile: a two-sided 95% interval


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (95% by default); (NaN, NaN) with no trials.

    Unlike the normal approximation p +- z*sqrt(p(1-p)/n) it stays inside [0, 1] and is not empty at 0
    or n successes: 0 of 30 gives [0, 0.114] (z^2/n / (1 + z^2/n)), the "rule of three" region. So a
    rate measured as 0 on n samples is only shown below 1% at 95% when n is at least ~380.
    """
    if trials <= 0:
        return math.nan, math.nan
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be in [0, {trials}], got {successes}")
    p = successes / trials
    scale = 1.0 + z * z / trials
    center = (p + z * z / (2 * trials)) / scale
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / scale
    # at 0 or n successes the bound is 0 or 1 exactly (rounding would leave 0.9999999999999999)
    return (0.0 if successes == 0 else center - half), (1.0 if successes == trials else center + half)
