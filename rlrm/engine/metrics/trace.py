"""Chrome-trace export: spans as complete ("X") events, one lane (thread) per component.

Open `<run>/trace.json` in Perfetto (ui.perfetto.dev) or chrome://tracing.

While a run goes on, `TraceStream` appends each finished step's spans to `trace.json` in Chrome's
JSON Array Format (`[` then one event per line), flushed every step: that format lets the closing
`]` be missing, so a run killed mid-way (kill -9, out of memory) keeps the trace of its finished
steps and opens as it is (`read_chrome_trace` reads it too). At the end of a run the file is
rewritten whole, atomically, in the JSON Object Format (`{"traceEvents": [...]}`).
"""

from __future__ import annotations

import heapq
import json
from pathlib import Path

from rlrm.engine.metrics.timing import Span

_LANES = ("trainer", "gen_wait", "reward_wait", "rollout", "generate", "reward")


class _RowPacker:
    """Puts spans of one lane that overlap (concurrent requests, concurrent reward calls) on as many
    rows (trace threads) as needed: `generate`, `generate #1`, ...; a row never holds overlapping events."""

    def __init__(self):
        self.names: list[str] = []  # thread id -> row name
        self._rows: dict[str, list[tuple[int, float]]] = {}  # lane -> (thread id, end of its last span) per row

    def events(self, spans: list[Span], origin_s: float) -> tuple[list[dict], list[int]]:
        """The "X" events of `spans` (lanes in the usual order) and the thread ids this call created."""
        by_lane: dict[str, list] = {}
        for span in spans:
            by_lane.setdefault(span.lane, []).append(span)
        order = [lane for lane in _LANES if lane in by_lane] + [lane for lane in by_lane if lane not in _LANES]
        events, first_new = [], len(self.names)
        for lane in order:
            rows = self._rows.setdefault(lane, [])
            # Each span takes the lowest row whose last span ended by its start. Spans go by start, so a row
            # once free stays free for the rest of this call: heaps of busy (end, row) and free rows find it in
            # O(log rows), where scanning the rows cost O(rows) a span (256 concurrent requests: ~3 ms a step).
            busy = [(end, row) for row, (_, end) in enumerate(rows)]
            heapq.heapify(busy)
            free: list[int] = []
            for span in sorted(by_lane[lane], key=lambda sp: sp.start_s):
                while busy and busy[0][0] <= span.start_s:
                    heapq.heappush(free, heapq.heappop(busy)[1])
                row = heapq.heappop(free) if free else len(rows)
                if row == len(rows):
                    rows.append((len(self.names), span.end_s))
                    self.names.append(lane if row == 0 else f"{lane} #{row}")
                tid = rows[row][0]
                rows[row] = (tid, span.end_s)
                heapq.heappush(busy, (span.end_s, row))
                event = {
                    "name": span.name,
                    "cat": span.lane,
                    "ph": "X",
                    "pid": 0,
                    "tid": tid,
                    "ts": (span.start_s - origin_s) * 1e6,  # microseconds
                    "dur": (span.end_s - span.start_s) * 1e6,
                }
                if span.args:
                    event["args"] = span.args
                events.append(event)
        return events, list(range(first_new, len(self.names)))

    def thread_events(self, tids: list[int]) -> list[dict]:
        """Metadata naming and ordering the rows `tids`."""
        out = []
        for tid in tids:
            out.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": self.names[tid]}})
            out.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": tid, "args": {"sort_index": tid}})
        return out


def chrome_trace_events(spans: list, origin_s: float = 0.0) -> list[dict]:
    """Trace events for `spans` (each with lane, name, start_s, end_s, args), times relative to origin.

    Spans of one lane that overlap are packed into as many rows as needed (see `_RowPacker`).
    """
    packer = _RowPacker()
    events, tids = packer.events(spans, origin_s)
    return events + packer.thread_events(tids)


def write_chrome_trace(path: Path, spans: list, origin_s: float = 0.0) -> None:
    """Write the spans as a Chrome trace JSON file (atomically)."""
    path = Path(path)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"traceEvents": chrome_trace_events(spans, origin_s), "displayTimeUnit": "ms"}))
    tmp.replace(path)


class TraceStream:
    """`trace.json` written as a run goes: `append(spans)` after each step, `close()` at the end."""

    def __init__(self, path: Path, origin_s: float):
        self.path, self.origin_s = Path(path), origin_s
        self._packer = _RowPacker()
        self._file = self.path.open("w", encoding="utf-8")
        self._file.write("[\n")
        self._file.flush()

    def append(self, spans: list) -> None:
        """Append the events of `spans` (one line each, each line ending in a comma) and flush."""
        if not spans:
            return
        events, tids = self._packer.events(spans, self.origin_s)
        lines = "".join(json.dumps(ev) + ",\n" for ev in self._packer.thread_events(tids) + events)
        self._file.write(lines)  # one write per step: a kill lands between steps, or cuts only the last line
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def read_chrome_trace(data: bytes, loads=json.loads) -> list[dict]:
    """The events of a Chrome trace: the Object Format, or the Array Format with or without its
    closing `]` (a run that was killed), its last line possibly cut.

    Raises:
        ValueError: the bytes are not a trace in either format.
        TypeError: `traceEvents` is not a list.
    """
    try:
        parsed = loads(data)
    except ValueError:
        text = data.rstrip()
        if not text.startswith(b"["):
            raise
        try:
            parsed = loads(text.rstrip(b",") + b"]")
        except ValueError:
            # A kill mid-write leaves a cut last line: keep the complete lines before it.
            parsed = loads(text[: text.rfind(b"\n")].rstrip().rstrip(b",") + b"]")
    events = parsed.get("traceEvents", []) if isinstance(parsed, dict) else parsed
    if not isinstance(events, list):
        raise TypeError("traceEvents is not a list")
    return events
