"""Values made fit for strict JSON: NaN and infinities become null, numpy scalars Python numbers.

    json.dumps(json_safe({"rate": float("nan"), "n": np.int64(3)}))   # '{"rate": null, "n": 3}'

Python's json writes a bare `NaN`, which jq, `JSON.parse` and most other readers refuse.
"""

from __future__ import annotations

import math


def json_safe(value):
    """`value` with every non-finite float replaced by None, numpy scalars by Python ones, numpy arrays and tuples
    by lists."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):  # np.float32, np.bool_, arrays (no import)
        return json_safe(value.tolist())
    return None if isinstance(value, float) and not math.isfinite(value) else value
