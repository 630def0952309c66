"""Chrome-trace export: spans as complete ("X") events, one lane (thread) per component.

Open `<run>/trace.json` in Perfetto (ui.perfetto.dev) or chrome://tracing.

While a run goes on, `TraceStream` appends each finished step's spans to `trace.json` in Chrome's
JSON Array Format (`[` then one event per line), flushed every step: that format lets the closing
`]` be missing, so a run killed mid-way (kill -9, out of memory) keeps the trace of its finished
steps and opens as it is (`read_chrome_trace` reads it too). At the end of a run the file is
rewritten whole, atomically, in the JSON Object Format (`{"traceEvents": [...]}`).

A resumed run keeps the events of its earlier sessions (`resume_trace`): each session is a trace process
of its own (pid 0, 1, ...: its rows never mix with another's), named "session 2 (resumed after step 3)",
and placed after the earlier sessions in time. The `process_name` event of a resumed session also
carries `resumed_after_step`, `shift_s` (added to its own clock to give the trace clock) and `wall_offset_s` (where
its rows' `perf/wall_s` start: its own clock plus that), so a step of metrics.jsonl can be found in the trace.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass, field
from pathlib import Path

from rlrm.engine.metrics.timing import Span
from rlrm.errors import write_whole, writing_to

_LANES = ("trainer", "gen_wait", "reward_wait", "rollout", "generate", "reward")
SESSION_GAP_S = 1.0  # between the end of one session's events and the start of the next's (the real gap is unknown)


class _RowPacker:
    """Puts spans of one lane that overlap (concurrent requests, concurrent reward calls) on as many
    rows (trace threads) as needed: `generate`, `generate #1`, ...; a row never holds overlapping events."""

    def __init__(self, pid: int = 0):
        self.pid = pid  # the trace process (the run's session) the rows belong to
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
                    "pid": self.pid,
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
            row = {"ph": "M", "pid": self.pid, "tid": tid}
            out.append({"name": "thread_name", **row, "args": {"name": self.names[tid]}})
            out.append({"name": "thread_sort_index", **row, "args": {"sort_index": tid}})
        return out


def chrome_trace_events(spans: list, origin_s: float = 0.0, pid: int = 0) -> list[dict]:
    """Trace events for `spans` (each with lane, name, start_s, end_s, args), times relative to origin,
    in trace process `pid`.

    Spans of one lane that overlap are packed into as many rows as needed (see `_RowPacker`).
    """
    packer = _RowPacker(pid)
    events, tids = packer.events(spans, origin_s)
    return events + packer.thread_events(tids)


def write_chrome_trace(path: Path, spans: list, origin_s: float = 0.0) -> None:
    """Write the spans as a Chrome trace JSON file (atomically)."""
    _write_events(Path(path), chrome_trace_events(spans, origin_s))


def _write_events(path: Path, events: list[dict]) -> None:
    text = json.dumps({"traceEvents": events, "displayTimeUnit": "ms"})
    write_whole(path, lambda tmp: tmp.write_text(text))


@dataclass(frozen=True)
class TraceSession:
    """Where one session of a run puts its events in trace.json."""

    pid: int = 0  # its trace process: 0 for a run's first session, then 1, 2, ...
    shift_s: float = 0.0  # added to its times (seconds from its origin) so it starts after the kept events end
    kept: list[dict] = field(default_factory=list)  # earlier sessions' events, then this session's process names


def resume_trace(
    old: list[dict], resumed_after_step: int, gap_s: float = SESSION_GAP_S, wall_offset_s: float = 0.0
) -> TraceSession:
    """The session that continues a trace whose events are `old` (a run resumed after `resumed_after_step`).
    `wall_offset_s`: where this session's `perf/wall_s` starts (the trainer goes on from the last row's).

    A pure function of the events: the caller reads them (`read_chrome_trace`) and writes the result.
    """
    pids = {ev.get("pid", 0) for ev in old}
    pid = max(pids, default=-1) + 1
    ends = [ev["ts"] + ev.get("dur", 0.0) for ev in old if isinstance(ev.get("ts"), (int, float))]  # microseconds
    shift_s = (max(ends) / 1e6 + gap_s) if ends else 0.0
    named = {ev.get("pid", 0) for ev in old if ev.get("ph") == "M" and ev.get("name") == "process_name"}
    kept = list(old)
    for unnamed in sorted(pids - named):  # a first session names itself only once resumed
        kept += _process_events(unnamed, {"name": f"session {unnamed + 1}"})
    label = f"session {pid + 1} (resumed after step {resumed_after_step})"
    args = {"name": label, "resumed_after_step": resumed_after_step, "shift_s": shift_s, "wall_offset_s": wall_offset_s}
    kept += _process_events(pid, args)
    return TraceSession(pid=pid, shift_s=shift_s, kept=kept)


def _process_events(pid: int, name_args: dict) -> list[dict]:
    """Metadata naming trace process `pid` and keeping the processes in session order."""
    return [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": name_args},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
    ]


def session_shifts(events: list[dict]) -> list[tuple[int, float]]:
    """(resumed_after_step, shift) of each resumed session of a trace, by step: what turns its rows' `perf/wall_s`
    into trace time (its `shift_s` less the `wall_offset_s` its rows start from; runs before 2026-11-29 counted
    each session's `perf/wall_s` from 0)."""
    shifts = []
    for ev in events:
        args = ev.get("args") or {}
        if ev.get("ph") == "M" and ev.get("name") == "process_name" and "resumed_after_step" in args:
            shift = float(args.get("shift_s", 0.0)) - float(args.get("wall_offset_s", 0.0))
            shifts.append((int(args["resumed_after_step"]), shift))
    return sorted(shifts)


def shift_of(shifts: list[tuple[int, float]], step: int) -> float:
    """The shift of step `step`'s row: that of the last session resumed before it (the one that ran it last)."""
    return next((s for after, s in reversed(shifts) if after < step), 0.0)


class TraceStream:
    """`trace.json` written as a run goes: `append(spans)` after each step, `write_whole(spans)` at the end.

    `resumed_after_step` > 0: a resumed run, whose trace.json keeps its earlier sessions' events (written
    again once, here) and gets this session's after them (see `resume_trace`); 0: a run from step 0,
    whose trace.json starts empty.
    """

    def __init__(self, path: Path, origin_s: float, resumed_after_step: int = 0, wall_offset_s: float = 0.0):
        self.path = Path(path)
        self.session = TraceSession()
        if resumed_after_step > 0 and self.path.is_file():
            self.session = resume_trace(_read_kept(self.path), resumed_after_step, wall_offset_s=wall_offset_s)
        self.origin_s = origin_s - self.session.shift_s
        self._packer = _RowPacker(self.session.pid)
        # the earlier sessions' events written aside, then put in place: a kill or a full disk meanwhile leaves the
        # old trace.json whole, where truncating it first lost them
        kept = self.session.kept
        write_whole(
            self.path, lambda fresh: fresh.write_text("[\n" + "".join(json.dumps(ev) + ",\n" for ev in kept), "utf-8")
        )
        with writing_to(self.path):
            self._file = self.path.open("a", encoding="utf-8")

    def append(self, spans: list) -> None:
        """Append the events of `spans` (one line each, each line ending in a comma) and flush."""
        if not spans:
            return
        events, tids = self._packer.events(spans, self.origin_s)
        lines = "".join(json.dumps(ev) + ",\n" for ev in self._packer.thread_events(tids) + events)
        with writing_to(self.path):
            self._file.write(lines)  # one write per step: a kill lands between steps, or cuts only the last line
            self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def write_whole(self, spans: list) -> None:
        """Close the stream and rewrite the file atomically: the kept events, then this session's `spans`."""
        self.close()
        _write_events(self.path, self.session.kept + chrome_trace_events(spans, self.origin_s, self.session.pid))


def _read_kept(path: Path) -> list[dict]:
    """The events of an earlier session's trace.json; none when it is unreadable (it is then replaced)."""
    try:
        return [ev for ev in read_chrome_trace(path.read_bytes()) if isinstance(ev, dict)]
    except (ValueError, TypeError):
        return []


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
