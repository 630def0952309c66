"""What a reward function reports beside its score: the numbers of its dict, averaged per step.

    return {"score": 1.0, "acc": True, "format": 0.5, "pred": "42"}   # a custom reward, as verl's docs show
    -> metrics.jsonl: reward/reported/acc/mean 0.75, reward/reported/format/mean 0.5   (a step's mean)
    -> samples.jsonl: reward_extra_info {"acc": true, "format": 0.5, "pred": "42",
                                         "reported_keys": ["acc", "format"]}       (per sample, as before)

verl keeps such keys as `reward_extra_info` and logs them per data source at validation; users who split a
score into parts (accuracy, format, length) want each part's curve in training too. Every key of the dict but
`score`, the components and the turn scores whose value is a real number or a bool (as 0 and 1) is averaged over
the step's samples that report it and did not fail; text and lists stay in samples.jsonl only. The names are
kept in the result's extra info under REPORTED_KEY, so a reward cache's answer brings them along and
samples.jsonl says which keys went into metrics. At most MAX_REPORTED names per step (the first, sorted), so a key per sample cannot flood
metrics.jsonl.
"""

from __future__ import annotations

import math

from rlrm.engine.rewards.base import is_bool, is_score

REPORTED_KEY = "reported_keys"
MAX_REPORTED = 32


def reported_names(raw: dict, reserved: tuple[str, ...]) -> list[str]:
    """The keys of a reward function's dict whose values are averaged per step: numbers and bools, `reserved` left
    out (the score, the components, the turn scores)."""
    return [key for key, value in raw.items() if key not in reserved and _averageable(value)]


def reported_metrics(results) -> dict[str, float]:
    """reward/reported/<name>/mean over the results (None or failed ones left out) that report `name` finite."""
    values: dict[str, list[float]] = {}
    for result in results:
        if result is None or result.extra.get("reward_failed"):
            continue
        for name in result.extra.get(REPORTED_KEY, ()):
            value = float(result.extra.get(name, math.nan))
            if math.isfinite(value):
                values.setdefault(str(name), []).append(value)
    return {
        f"reward/reported/{name}/mean": sum(seen) / len(seen) for name, seen in sorted(values.items())[:MAX_REPORTED]
    }


def _averageable(value) -> bool:
    """A number as a score is one (a 0-d array of text is not), or a bool."""
    if not (is_score(value) or is_bool(value)):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True
