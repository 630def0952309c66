"""What training's float32 tensors can hold: a score, a turn score or a setting beyond it would be inf there.

fits_float32(3e38)   # True
fits_float32(1e39)   # False: finite in Python, inf in a float32 tensor
"""

from __future__ import annotations

import math

FLOAT32_MAX = 3.4028234663852886e38  # a score beyond it is inf in the float32 tensors training computes in


def fits_float32(value: float) -> bool:
    """Finite, and finite still in the float32 tensors training computes with."""
    return math.isfinite(value) and abs(value) <= FLOAT32_MAX
