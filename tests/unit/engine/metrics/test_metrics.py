"""Metrics plumbing: idle ratios from busy intervals, the JSONL writer, the Chrome trace."""

from __future__ import annotations

import json
import math

import pytest

from rlrm.engine.metrics.intervals import idle_ratio, union_length
from rlrm.engine.metrics.metrics_file import MetricsWriter, read_metrics
from rlrm.engine.metrics.timing import Span, StepTimer
from rlrm.engine.metrics.trace import (
    TraceStream,
    chrome_trace_events,
    read_chrome_trace,
    resume_trace,
    write_chrome_trace,
)


def test_union_merges_overlaps():
    # [0,2] U [1,3] = [0,3] (3); [5,6] adds 1 -> 4
    assert union_length([(0, 2), (1, 3), (5, 6)]) == pytest.approx(4.0)
    # nested interval counts once
    assert union_length([(0, 10), (2, 3)]) == pytest.approx(10.0)
    assert union_length([]) == 0.0


def test_union_clips_to_window():
    # window [1, 5]: [0,2]->[1,2] (1), [4,9]->[4,5] (1)
    assert union_length([(0, 2), (4, 9)], window=(1, 5)) == pytest.approx(2.0)


def test_idle_ratio():
    # busy 3 of 10 seconds -> idle 0.7, overlapping spans are not double counted
    assert idle_ratio([(0, 2), (1, 3)], (0, 10)) == pytest.approx(0.7)
    assert idle_ratio([(0, 10)], (0, 10)) == pytest.approx(0.0)
    assert idle_ratio([], (0, 0)) == 0.0


def test_step_timer_accumulates_and_keeps_spans():
    timer = StepTimer()
    with timer("gen", lane="rollout"):
        pass
    with timer("gen", lane="rollout"):
        pass
    metrics = timer.metrics()
    assert set(metrics) == {"timing_s/gen"}
    assert len(timer.spans) == 2 and all(s.lane == "rollout" for s in timer.spans)
    assert metrics["timing_s/gen"] == pytest.approx(sum(s.end_s - s.start_s for s in timer.spans))


def test_step_timer_records_cpu_time_only_when_asked():
    import time

    def spin(cpu_seconds):  # until this process used that much CPU: a busy machine cannot shorten it
        end = time.process_time() + cpu_seconds
        while time.process_time() < end:
            pass

    timer = StepTimer(measure_cpu=True)
    with timer("gen", cpu=True):
        spin(0.05)  # computes: CPU time close to wall time
    with timer("reward", cpu=True):
        time.sleep(0.05)  # waits: next to no CPU time
    with timer("adv"):  # not asked: wall time only
        spin(0.01)
    metrics = timer.metrics()
    assert metrics["cpu_s/gen"] >= 0.05 and metrics["cpu_s/reward"] < 0.5 * metrics["cpu_s/gen"]
    assert metrics["timing_s/gen"] >= metrics["cpu_s/gen"] * 0.95  # wall time covers the CPU time of one thread
    assert metrics["cpu_s/reward"] < 0.5 * metrics["timing_s/reward"]
    assert "cpu_s/adv" not in metrics
    off = StepTimer()  # overlapping modes: the process's CPU time is not one phase's, so nothing is recorded
    with off("gen", cpu=True), off.cpu_time("update_actor"):
        spin(0.01)
    assert not any(k.startswith("cpu_s/") for k in off.metrics())


def test_metrics_writer_flushes_and_truncates_on_resume(tmp_path):
    path = tmp_path / "metrics.jsonl"
    writer = MetricsWriter(path)
    for step in (1, 2, 3):
        writer.log({"step": step, "loss": float(step), "bad": math.nan})
        assert len(read_metrics(path)) == step  # flushed every step
    writer.close()
    assert read_metrics(path)[0]["bad"] is None  # NaN is written as null, the file stays valid JSON
    with path.open("a") as f:
        f.write('{"step": 4, "lo')  # a crash mid-line
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]
    MetricsWriter(path, keep_through_step=2).close()
    assert [r["step"] for r in read_metrics(path)] == [1, 2]


def test_chrome_trace(tmp_path):
    spans = [Span("rollout", "gen", 10.0, 10.5), Span("trainer", "update", 10.5, 11.0, {"step": 1})]
    events = chrome_trace_events(spans, origin_s=10.0)
    xs = {e["name"]: e for e in events if e["ph"] == "X"}
    assert xs["gen"]["ts"] == pytest.approx(0.0) and xs["gen"]["dur"] == pytest.approx(5e5)
    assert xs["update"]["ts"] == pytest.approx(5e5) and xs["update"]["args"] == {"step": 1}
    assert {e["args"]["name"] for e in events if e["name"] == "thread_name"} >= {"rollout", "trainer"}
    write_chrome_trace(tmp_path / "trace.json", spans, origin_s=10.0)
    assert len(json.loads((tmp_path / "trace.json").read_text())["traceEvents"]) == len(events)


def test_trace_stream_is_readable_at_every_step_and_after_a_cut(tmp_path):
    # Written as the run goes (JSON Array Format, no closing `]` until the end), readable at any
    # point: what a run killed with kill -9 leaves behind.
    path = tmp_path / "trace.json"
    stream = TraceStream(path, origin_s=0.0)
    stream.append([Span("trainer", "update_actor", 0.0, 1.0), Span("generate", "r0", 0.0, 0.5)])
    assert read_chrome_trace(path.read_bytes()) == _events_in(path) and len(_events_in(path)) == 6
    with pytest.raises(ValueError):
        json.loads(path.read_text())  # not closed: plain JSON refuses it, the trace readers do not
    stream.append([Span("generate", "r1", 0.2, 0.9), Span("trainer", "update_actor", 1.0, 2.0)])
    events = read_chrome_trace(path.read_bytes())
    xs = [e for e in events if e["ph"] == "X"]
    assert [e["name"] for e in xs] == ["update_actor", "r0", "update_actor", "r1"]
    rows = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert sorted(rows.values()) == ["generate", "generate #1", "trainer"]  # r1 overlaps r0: a second row
    assert rows[next(e["tid"] for e in xs if e["name"] == "r1")] == "generate #1"
    with path.open("ab") as f:
        f.write(b'{"name": "cut", "ph": "X", "ts": 1')  # a kill in the middle of a write
    assert read_chrome_trace(path.read_bytes()) == events
    stream.close()
    write_chrome_trace(path, [Span("trainer", "update_actor", 0.0, 1.0)])  # the end of a run: the whole file, closed
    assert len(json.loads(path.read_text())["traceEvents"]) == len(read_chrome_trace(path.read_bytes())) == 3


def test_a_resumed_trace_keeps_the_earlier_sessions_and_goes_after_them(tmp_path):
    # Session 1 streamed its steps and was killed mid-write (last line cut). Session 2, resumed after step 2,
    # writes those events again, then its own after them: its own process (pid 1, rows from tid 0), its
    # times shifted to start 1 s (SESSION_GAP_S) after session 1's last event ended (r0: 2.5 s) -> 3.5 s.
    path = tmp_path / "trace.json"
    first = TraceStream(path, origin_s=100.0)
    first.append([Span("trainer", "update_actor", 100.0, 101.0), Span("generate", "r0", 100.0, 102.5)])
    with path.open("ab") as f:
        f.write(b'{"name": "cut", "ph"')
    old = read_chrome_trace(path.read_bytes())
    second = TraceStream(path, origin_s=500.0, resumed_after_step=2)
    second.append([Span("trainer", "update_actor", 500.0, 500.5, {"step": 3})])
    streamed = read_chrome_trace(path.read_bytes())
    assert streamed[: len(old)] == old and len(old) == 6
    new = [e for e in streamed[len(old) :] if e["ph"] == "X"]
    assert [(e["pid"], e["tid"], e["ts"], e["dur"]) for e in new] == [(1, 0, pytest.approx(3.5e6), pytest.approx(5e5))]
    names = {e["pid"]: e["args"] for e in streamed if e["name"] == "process_name"}
    assert names[0] == {"name": "session 1"}
    assert names[1] == {
        "name": "session 2 (resumed after step 2)",
        "resumed_after_step": 2,
        "shift_s": 3.5,
        "wall_offset_s": 0.0,
    }
    # The end of the session: the whole file, closed, the earlier events first, then every span of this session.
    second.write_whole([Span("trainer", "update_actor", 500.0, 500.5, {"step": 3}), Span("trainer", "val", 500.5, 501)])
    whole = json.loads(path.read_text())["traceEvents"]
    assert whole[: len(old)] == old
    assert [e["ts"] for e in whole if e["ph"] == "X" and e["pid"] == 1] == pytest.approx([3.5e6, 4.0e6])
    # A third session: pid 2, after session 2's last event (4.5 s) -> shift 5.5 s; a run from step 0 starts afresh.
    third = resume_trace(whole, resumed_after_step=3)
    assert (third.pid, third.shift_s) == (2, pytest.approx(5.5)) and third.kept[: len(whole)] == whole
    assert sum(e["name"] == "process_name" for e in third.kept) == 3  # sessions 1 and 2 named once each
    TraceStream(path, origin_s=0.0).close()
    assert read_chrome_trace(path.read_bytes()) == []


def _events_in(path):
    return [json.loads(line.rstrip(",")) for line in path.read_text().splitlines()[1:]]


def test_chrome_trace_packs_overlapping_spans_into_rows():
    # Three concurrent requests and one after them: three rows, the late one reuses row 0.
    spans = [Span("generate", f"r{i}", 0.0, 1.0 + i) for i in range(3)] + [Span("generate", "late", 1.5, 2.0)]
    events = chrome_trace_events(spans)
    tid = {e["name"]: e["tid"] for e in events if e["ph"] == "X"}
    assert len({tid["r0"], tid["r1"], tid["r2"]}) == 3
    assert tid["late"] == tid["r0"]
    rows = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert sorted(n for n in rows.values() if n.startswith("generate")) == ["generate", "generate #1", "generate #2"]
    for t in set(tid.values()):  # no row holds overlapping events
        row = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["ph"] == "X" and e["tid"] == t)
        assert all(a[1] <= b[0] for a, b in zip(row, row[1:]))


def _rows_by_scan(calls: list[list[Span]]) -> list[list[int]]:
    """The row of each span, call by call, as the first row free by its start (the packer's rule, by brute force)."""
    ends: dict[str, list[float]] = {}
    out = []
    for spans in calls:
        rows = []
        for span in sorted(spans, key=lambda sp: (sp.lane, sp.start_s)):
            lane = ends.setdefault(span.lane, [])
            row = next((i for i, end in enumerate(lane) if end <= span.start_s), len(lane))
            lane[row : row + 1] = [span.end_s]
            rows.append((span.name, row))
        out.append(sorted(rows))
    return out


def test_trace_rows_are_the_first_free_row_across_steps_and_ties(tmp_path):
    # 40 steps of 30 requests each, many concurrent, some starting exactly when another ended (that row is free),
    # some starting before the previous step's last ended: every span lands on the lowest row free at its start.
    import random

    rng = random.Random(0)
    calls, t = [], 0.0
    for step in range(40):
        spans = []
        for i in range(30):
            start = t + rng.choice([0.0, 0.5, 1.0, rng.random()])
            spans.append(Span("generate", f"s{step}-{i}", start, start + rng.choice([0.5, 1.0, rng.random() * 3])))
        calls.append(spans)
        t += 1.0
    stream = TraceStream(tmp_path / "trace.json", origin_s=0.0)
    for spans in calls:
        stream.append(spans)
    stream.close()
    events = read_chrome_trace((tmp_path / "trace.json").read_bytes())
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    row_of = {e["name"]: names[e["tid"]] for e in events if e["ph"] == "X"}
    expected = _rows_by_scan(calls)
    got = [
        sorted((n, 0 if row_of[n] == "generate" else int(row_of[n].split("#")[1])) for n, _ in rows)
        for rows in expected
    ]
    assert got == expected
    assert max(r for rows in expected for _, r in rows) >= 5  # the test packs real concurrency


def test_a_span_in_flight_at_a_windows_end_is_busy_in_that_window():
    # a reward call begun in step 1 and ended in step 2 was recorded at its end, and counted in step 2 alone:
    # one-step-off reported idle/reward 1.0 for a step whose reward was busy 90% of it
    from rlrm.engine.metrics.idle import IdleMeter
    from rlrm.engine.metrics.spans import SpanLog
    from rlrm.engine.metrics.timing import Span

    spans = SpanLog()
    meter = IdleMeter(spans)
    token = spans.open("reward", 2.0)
    first = meter.measure((0.0, 10.0))
    spans.close(token)
    spans.append(Span("reward", "reward", 2.0, 12.0))
    second = meter.measure((10.0, 20.0))
    assert first["idle/reward"] == pytest.approx(0.2) and second["idle/reward"] == pytest.approx(0.8)


def test_a_resumed_trace_that_fails_to_write_its_earlier_sessions_keeps_them(tmp_path, monkeypatch):
    """A resume writes the earlier sessions' events again; trace.json was truncated first, so a kill or a full disk
    in between lost them all. They are written aside and put in place now."""
    from rlrm.engine.metrics import trace

    path = tmp_path / "trace.json"
    first = TraceStream(path, origin_s=100.0)
    first.append([Span("trainer", "update_actor", 100.0, 101.0), Span("generate", "r0", 100.0, 102.5)])
    first.close()
    old = read_chrome_trace(path.read_bytes())
    calls = []
    real = json.dumps

    def full_disk(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(trace.json, "dumps", full_disk)
    with pytest.raises(OSError) as cut:
        TraceStream(path, origin_s=500.0, resumed_after_step=2)
    assert cut.value.filename == str(path) + ".tmp"
    assert read_chrome_trace(path.read_bytes()) == old and len(old) == 6


def test_numpy_arrays_in_a_rewards_extra_info_are_written_as_lists(tmp_path):
    # a verl-style reward returning {"score": ..., "per_test": np.array([...])}: `.item()` on the array killed the
    # run at step 1 with save_samples on, and `rlrm inspect reward --json` with "unexpected ValueError"
    import json

    import numpy as np
    import torch

    from rlrm.engine.metrics.metrics_file import MetricsWriter
    from rlrm.json_values import json_safe

    extra = {"per_test": np.array([1.0, 0.0, 1.0]), "nested": [np.float32(1.5), {"t": torch.tensor([2, 3])}]}
    expected = {"per_test": [1.0, 0.0, 1.0], "nested": [1.5, {"t": [2, 3]}]}
    writer = MetricsWriter(tmp_path / "rows.jsonl")
    writer.log({"step": 1, "extra": extra, "nan": np.float64("nan")})
    writer.close()
    assert json.loads((tmp_path / "rows.jsonl").read_text()) == {"step": 1, "extra": expected, "nan": None}
    assert json_safe({"per_test": np.array([1.0, np.nan])}) == {"per_test": [1.0, None]}
