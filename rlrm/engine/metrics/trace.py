"""Chrome-trace export: spans as complete ("X") events, one lane (thread) per component.

Open `<run>/trace.json` in Perfetto (ui.perfetto.dev) or chrome://tracing.
"""

from __future__ import annotations

import json
from pathlib import Path

_LANES = ("rollout", "reward", "trainer")


def chrome_trace_events(spans: list, origin_s: float = 0.0) -> list[dict]:
    """Trace events for `spans` (each with lane, name, start_s, end_s), times relative to origin."""
    lanes = {lane: i for i, lane in enumerate(_LANES)}
    events = []
    for span in spans:
        tid = lanes.setdefault(span.lane, len(lanes))
        events.append(
            {
                "name": span.name,
                "cat": span.lane,
                "ph": "X",
                "pid": 0,
                "tid": tid,
                "ts": (span.start_s - origin_s) * 1e6,  # microseconds
                "dur": (span.end_s - span.start_s) * 1e6,
            }
        )
    for lane, tid in lanes.items():
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": lane}})
    return events


def write_chrome_trace(path: Path, spans: list, origin_s: float = 0.0) -> None:
    """Write the spans as a Chrome trace JSON file (atomically)."""
    path = Path(path)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"traceEvents": chrome_trace_events(spans, origin_s), "displayTimeUnit": "ms"}))
    tmp.replace(path)
