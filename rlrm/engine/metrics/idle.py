"""idle/* of each step window, from the busy intervals every component records in the SpanLog.

    meter = IdleMeter(spans)
    meter.measure((step_start_s, step_end_s))   # {"idle/trainer": 0.31, "idle/rollout": ..., ...}

A span recorded during one step may reach into the next one (a reward call of a batch generated
ahead), so spans that end after a window's start are kept for the next window. A span still open when a window
ends (SpanLog.open: a reward call in flight across the end of a step) is busy from its start to the window's end:
recorded only once it ends, it would otherwise count in the next window alone (one-step-off reported
idle/reward 1.0 for a step whose reward was busy 90% of it).
"""

from __future__ import annotations

from rlrm.engine.metrics.intervals import idle_ratio, union_length
from rlrm.engine.metrics.spans import SpanLog


class IdleMeter:
    def __init__(self, spans: SpanLog):
        self.spans = spans
        self._seen = spans.cursor()
        self._live: list = []  # spans that may still overlap the next window

    def measure(self, window: tuple[float, float]) -> dict[str, float]:
        """idle/trainer, idle/rollout, idle/reward (1 - busy share) and idle/reward_wait (the trainer's wait share)."""
        fresh = self.spans.since(self._seen)
        self._seen = self.spans.cursor()
        self._live = [sp for sp in self._live + fresh if sp.end_s > window[0]]
        lanes: dict[str, list] = {}
        for sp in self._live:
            lanes.setdefault(sp.lane, []).append((sp.start_s, sp.end_s))
        for lane, start in self.spans.still_open():
            lanes.setdefault(lane, []).append((start, window[1]))
        wall = window[1] - window[0]
        waited = union_length(lanes.get("reward_wait", []), window)
        return {
            "idle/trainer": idle_ratio(lanes.get("trainer", []), window),
            "idle/rollout": idle_ratio(lanes.get("rollout", []), window),
            "idle/reward": idle_ratio(lanes.get("reward", []), window),
            "idle/reward_wait": waited / wall if wall > 0 else 0.0,
        }

    def rewind(self) -> None:
        """The log was compacted: continue from its end."""
        self._seen = self.spans.cursor()
