"""Chrome-trace export: spans as complete ("X") events, one lane (thread) per component.

Open `<run>/trace.json` in Perfetto (ui.perfetto.dev) or chrome://tracing.
"""

from __future__ import annotations

import json
from pathlib import Path

_LANES = ("trainer", "gen_wait", "reward_wait", "rollout", "generate", "reward")


def chrome_trace_events(spans: list, origin_s: float = 0.0) -> list[dict]:
    """Trace events for `spans` (each with lane, name, start_s, end_s, args), times relative to origin.

    Spans of one lane that overlap (concurrent requests, concurrent reward calls) are packed into
    as many rows as needed (`generate`, `generate #1`, ...), since a trace row must not hold
    overlapping events.
    """
    by_lane: dict[str, list] = {lane: [] for lane in _LANES}
    for span in spans:
        by_lane.setdefault(span.lane, []).append(span)
    events, names = [], []
    for lane, lane_spans in by_lane.items():
        row_ends: list[float] = []  # end of the last span in each row of this lane
        first_tid = len(names)
        for span in sorted(lane_spans, key=lambda sp: sp.start_s):
            row = next((i for i, end in enumerate(row_ends) if end <= span.start_s), len(row_ends))
            if row == len(row_ends):
                row_ends.append(span.end_s)
                names.append(lane if row == 0 else f"{lane} #{row}")
            row_ends[row] = span.end_s
            event = {
                "name": span.name,
                "cat": span.lane,
                "ph": "X",
                "pid": 0,
                "tid": first_tid + row,
                "ts": (span.start_s - origin_s) * 1e6,  # microseconds
                "dur": (span.end_s - span.start_s) * 1e6,
            }
            if getattr(span, "args", None):
                event["args"] = span.args
            events.append(event)
    for tid, name in enumerate(names):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": name}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": tid, "args": {"sort_index": tid}})
    return events


def write_chrome_trace(path: Path, spans: list, origin_s: float = 0.0) -> None:
    """Write the spans as a Chrome trace JSON file (atomically)."""
    path = Path(path)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"traceEvents": chrome_trace_events(spans, origin_s), "displayTimeUnit": "ms"}))
    tmp.replace(path)
