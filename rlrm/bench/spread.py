"""How sure a benchmark's number is: the median over repeats and an interval around it. Pure.

    spread([1.71, 1.80, 1.77, 1.83, 1.75])   # Spread(median=1.77, lo=1.73, hi=1.81, method="bootstrap95")

- 5 repeats or more: a percentile bootstrap 95% interval of the median (2,000 resamples, seeded, so the
  same numbers give the same interval every time);
- 2 to 4 repeats: min-max (a bootstrap of so few values is mostly the values themselves);
- 1 repeat: no interval (`lo`/`hi` are NaN, method "unknown").

A mode is "within noise" of sync when its speedup interval holds 1.0: the repeats cannot tell it
apart from sync's throughput.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlrm.stats import quantile

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
