"""Summary statistics shared by the reward loop, the benchmark tables and the parity report. Pure.

quantile([3.0, 1.0, 2.0, 4.0], 0.5)   # 2.5: linear interpolation, as numpy.quantile by default
"""

from __future__ import annotations

import math
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
