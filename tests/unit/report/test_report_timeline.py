"""Timelines: the step window, lanes as collections of rectangles, step numbers from the trace."""

from __future__ import annotations

import json

import pytest

from rlrm.errors import ConfigError
from rlrm.report.folders import load_folder
from rlrm.report.timeline import parse_steps, timeline_figure, timeline_panel


def test_parse_steps():
    assert parse_steps("2:4") == (2, 4)
    assert parse_steps("3") == (3, 3)
    assert parse_steps(":4") == (1, 4)
    assert parse_steps(None) is None
    for bad in ("4:2", "a:b", "-1"):
        with pytest.raises(ConfigError, match="--steps"):
            parse_steps(bad)


def test_default_window_is_steps_2_to_4(folders, notes):
    run = load_folder(folders["a"], notes)
    panel = timeline_panel(run, None, notes)
    assert panel.title == "a (sync), steps 2-4"
    # synthetic trace, per step: 1 gen_wait, 4 generate, 4 reward, 1 reward_wait, 4 trainer spans
    counts = panel.events["lane"].value_counts().to_dict()
    assert counts == {"generate": 12, "reward": 12, "trainer": 12, "gen_wait": 3, "reward_wait": 3}
    assert panel.events["start_s"].min() == pytest.approx(0.0)
    assert sorted(panel.step_starts) == [2, 3, 4]


def test_gantt_has_one_collection_per_lane(folders, notes):
    runs = [load_folder(folders[k], notes) for k in ("a", "b")]
    fig = timeline_figure([timeline_panel(run, (5, 5), notes) for run in runs])
    assert len(fig.axes) == 2
    ax = fig.axes[0]
    labels = [c.get_label() for c in ax.collections]
    assert labels == [
        "generation (requests)",
        "reward",
        "training",
        "trainer waits: generation",
        "trainer waits: reward",
    ]
    assert [len(c.get_paths()) for c in ax.collections] == [4, 4, 4, 1, 1]
    assert [t.get_text() for t in ax.get_yticklabels()] == labels
    assert "b (stream), step 5" in fig.axes[1].get_title(loc="left")


def test_window_from_trace_step_numbers(tmp_path, notes):
    # no perf/wall_s in the metrics: each step's span comes from events with args.step
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": k}) + "\n" for k in (1, 2, 3)))
    events = []
    for k in (1, 2, 3):
        t0 = (k - 1) * 1e6  # one second per step, in microseconds
        events.append({"name": "gen", "cat": "rollout", "ph": "X", "ts": t0, "dur": 4e5, "args": {"step": k}})
        events.append({"name": "update", "cat": "trainer", "ph": "X", "ts": t0 + 5e5, "dur": 5e5, "args": {"step": k}})
    (tmp_path / "trace.json").write_text(json.dumps({"traceEvents": events}))
    panel = timeline_panel(load_folder(tmp_path, notes), (2, 3), notes)
    assert len(panel.events) == 4 and panel.step_starts == {2: 0.0, 3: 1.0}
    assert panel.events["end_s"].max() == pytest.approx(2.0)


def _resumed_run(folder, session_2_walls: float, **session_2) -> None:
    """Session 1 ran steps 1-2 (1 s each from 0 s); session 2 resumed after step 2, its events 3 s later in the
    trace (shift_s): step 3 is at 3-4 s there. `session_2_walls`: step 3's perf/wall_s."""
    rows = [
        {"step": 1, "perf/wall_s": 1.0},
        {"step": 2, "perf/wall_s": 2.0},
        {"step": 3, "perf/wall_s": session_2_walls},
    ]
    lines = [json.dumps({**row, "perf/time_per_step": 1.0}) + "\n" for row in rows]
    (folder / "metrics.jsonl").write_text("".join(lines))
    events = [
        {"name": "update", "cat": "trainer", "ph": "X", "pid": pid, "tid": 0, "ts": ts, "dur": 1e6}
        for pid, ts in ((0, 0.0), (0, 1e6), (1, 3e6))
    ]
    args = {"name": "session 2 (resumed after step 2)", "resumed_after_step": 2, "shift_s": 3.0, **session_2}
    events.append({"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": args})
    (folder / "trace.json").write_text(json.dumps({"traceEvents": events}))


def test_a_resumed_runs_steps_are_found_in_its_later_session(tmp_path, notes):
    _resumed_run(tmp_path, 1.0)  # as runs before 2026-11-29 wrote it: session 2's perf/wall_s restarted at 0
    panel = timeline_panel(load_folder(tmp_path, notes), (2, 3), notes)
    assert panel.step_starts == {2: 0.0, 3: 2.0}  # without the shift, step 3 began at 0 s, before step 2
    assert panel.events["start_s"].tolist() == [0.0, 2.0]  # steps 2 and 3's updates, nothing of step 1


def test_a_resumed_session_whose_wall_clock_goes_on_is_placed_by_its_offset(tmp_path, notes):
    _resumed_run(tmp_path, 3.0, wall_offset_s=2.0)  # perf/wall_s goes on from step 2's, as the trainer writes it now
    panel = timeline_panel(load_folder(tmp_path, notes), (2, 3), notes)
    assert panel.step_starts == {2: 0.0, 3: 2.0}  # shifting by shift_s alone put step 3 at 4-5 s, past its update
    assert panel.events["start_s"].tolist() == [0.0, 2.0]


def test_missing_trace_and_empty_window_are_notes(tmp_path, folders, notes):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    assert timeline_panel(load_folder(tmp_path, notes), None, notes) is None
    panel = timeline_panel(load_folder(folders["a"], notes), (50, 60), notes)
    assert panel.events.empty
    assert any("no trace.json" in n for n in notes) and any("no steps 50-60" in n for n in notes)
    timeline_figure([panel])  # an empty panel still draws


def test_every_panel_shows_its_whole_window():
    import pandas as pd

    from rlrm.report.timeline import TimelinePanel

    def panel(title: str, step_s: float) -> TimelinePanel:
        # steps 1-3, each generation for the first half of the step and training for the second
        rows = [("rollout", "gen", k * step_s, (k + 0.5) * step_s) for k in range(3)]
        rows += [("trainer", "update", (k + 0.5) * step_s, (k + 1) * step_s) for k in range(3)]
        events = pd.DataFrame(rows, columns=["lane", "name", "start_s", "end_s"])
        return TimelinePanel(title, events, {k + 1: k * step_s for k in range(3)})

    # before: sharex with each panel setting its own xlim, the last (shortest, 3 s) range won: sync showed 1.5 steps
    fig = timeline_figure([panel("sync, steps 1-3", 6.0), panel("fully-async, steps 1-3", 1.0)])
    for ax, end_s in zip(fig.axes, (18.0, 3.0)):
        left, right = ax.get_xlim()
        assert left <= 0.0 and right >= end_s, (ax.get_title(loc="left"), ax.get_xlim())
    assert fig.axes[0].get_xlim() == fig.axes[1].get_xlim()  # one time axis: a second is as wide in each
