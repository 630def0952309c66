"""Timelines from `trace.json`: a Gantt chart with lanes for generation, reward and training.

    panel = timeline_panel(run, parse_steps("2:4"), notes)
    fig = timeline_figure([panel])

The window is a range of trainer steps. Each step's time span comes from metrics.jsonl
(`perf/wall_s` is measured from the same origin as the trace, `perf/time_per_step` says when the
step began); without those, from trace events that carry a step number (`args.step`, or
`args.batch`: the batch of prompts of that step). Every event overlapping the window is drawn, so
in the overlapped modes one sees the next step's generation run beside this step's rewards and
update. Concurrent spans in one lane (requests, reward workers) are stacked in sub-rows.

A resumed run's trace holds one process per session, each after the one before in time; `perf/wall_s`
restarts with each session, so the steps of a resumed session are moved by its `shift_s` (see
rlrm/engine/metrics/trace.py).
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rlrm.engine.metrics.trace import read_chrome_trace, session_shifts, shift_of
from rlrm.errors import ConfigError
from rlrm.report.figures import new_figure, note_axes
from rlrm.report.folders import json_loads

if TYPE_CHECKING:
    import pandas as pd

# Trace lanes (the `cat` of each span) in drawing order, with their row label and colour. Lanes
# not listed here are drawn after these, in grey, under their own name.
LANES = {
    "generate": ("generation (requests)", "tab:blue"),
    "rollout": ("generation", "tab:blue"),
    "reward": ("reward", "tab:orange"),
    "trainer": ("training", "tab:green"),
    "minibatch": ("training (mini-batches)", "yellowgreen"),
    "gen_wait": ("trainer waits: generation", "lightsteelblue"),
    "reward_wait": ("trainer waits: reward", "navajowhite"),
}
DEFAULT_STEPS = (2, 4)  # step 1 carries warm-up (first compile, caches); show the steady state
_MAX_SUBROWS = 12


@dataclass
class TimelinePanel:
    """What one run contributes to a timeline: its events in the window, relative to its start."""

    title: str
    events: pd.DataFrame  # lane, name, start_s, end_s (seconds from the window start)
    step_starts: dict[int, float] = field(default_factory=dict)  # step -> seconds from window start


def parse_steps(text: str | None) -> tuple[int, int] | None:
    """'2:4' -> (2, 4); '3' -> (3, 3); ':4' -> (1, 4); '2:' -> (2, large); None -> None."""
    if text is None:
        return None
    first, sep, last = text.partition(":")
    try:
        start = int(first) if first.strip() else 1
        end = (int(last) if last.strip() else 10**12) if sep else start
    except ValueError:
        raise ConfigError(f"--steps takes A:B (e.g. 2:4), not {text!r}") from None
    if start < 0 or end < start:
        raise ConfigError(f"--steps {text}: the range must be 0 <= A <= B")
    return start, end


def read_trace(path) -> list[dict]:
    """The events of a Chrome trace file ({"traceEvents": [...]} or a bare list, whose closing `]`
    a killed run leaves out)."""
    return read_chrome_trace(Path(path).read_bytes(), json_loads())


def events_frame(events: list[dict], window: tuple[float, float] | None = None, lanes: set[str] | None = None):
    """The complete ("X") events as a DataFrame (seconds), keeping those overlapping `window`
    (seconds) and in `lanes` when given. Columns: lane, name, start_s, end_s, step, injected_latency_s."""
    import pandas as pd

    thread_names = {
        (ev.get("pid"), ev.get("tid")): (ev.get("args") or {}).get("name")
        for ev in events
        if ev.get("ph") == "M" and ev.get("name") == "thread_name"
    }
    lo, hi = (window[0] * 1e6, window[1] * 1e6) if window else (float("-inf"), float("inf"))  # microseconds
    rows = []
    for ev in events:
        if ev.get("ph") != "X":
            continue
        ts = ev.get("ts")
        if ts is None:
            continue
        end = ts + ev.get("dur", 0.0)
        if end <= lo + 1.0 or ts >= hi - 1.0:  # overlaps under 1 us are clock rounding, not overlap
            continue
        lane = ev.get("cat") or thread_names.get((ev.get("pid"), ev.get("tid"))) or "other"
        if lanes is not None and lane not in lanes:
            continue
        args = ev.get("args") or {}
        rows.append(
            (
                lane,
                ev.get("name", ""),
                ts / 1e6,
                end / 1e6,
                args.get("step", args.get("batch")),
                args.get("injected_latency_s"),
            )
        )
    frame = pd.DataFrame(rows, columns=["lane", "name", "start_s", "end_s", "step", "injected_latency_s"])
    for col in ("step", "injected_latency_s"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    return frame


def timeline_panel(run, steps: tuple[int, int] | None, notes: list[str]) -> TimelinePanel | None:
    """The events of `run` in the step window (default: steps 2-4, or what the run has)."""
    if run.trace_path is None:
        notes.append(f"{run.name}: no trace.json; left out of the timeline")
        return None
    try:
        events = read_trace(run.trace_path)
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError, TypeError, AttributeError) as exc:
        notes.append(f"{run.name}: trace.json is unreadable ({exc}); left out of the timeline")
        return None
    spans = _metrics_step_spans(run.metrics, session_shifts(events)) or _trace_step_spans(events)
    label = f"{run.name} ({run.mode})" if run.mode else run.name
    if not spans:
        notes.append(f"{run.name}: neither metrics nor trace give step times; its timeline shows the whole trace")
        inside, chosen = events_frame(events), {}
        window = (inside["start_s"].min(), inside["end_s"].max()) if not inside.empty else (0.0, 0.0)
    else:
        chosen = _choose(spans, steps)
        if not chosen and steps is not None:  # without steps, _choose picks steps that exist
            notes.append(f"{run.name}: no steps {steps[0]}-{steps[1]}; its timeline panel is empty")
            return TimelinePanel(title=f"{label}: no steps {steps[0]}-{steps[1]}", events=events_frame([]))
        window = (min(s for s, _ in chosen.values()), max(e for _, e in chosen.values()))
        label += f", steps {min(chosen)}-{max(chosen)}" if len(chosen) > 1 else f", step {min(chosen)}"
        inside = events_frame(events, window)
    if inside.empty:
        notes.append(f"{run.name}: trace.json holds no spans in the timeline window")
    inside["start_s"] = inside["start_s"].clip(lower=window[0]) - window[0]
    inside["end_s"] = inside["end_s"].clip(upper=window[1]) - window[0]
    starts = {step: start - window[0] for step, (start, _) in chosen.items()}
    return TimelinePanel(title=label, events=inside, step_starts=starts)


def _metrics_step_spans(metrics, shifts: list[tuple[int, float]]) -> dict[int, tuple[float, float]]:
    """step -> (start_s, end_s) on the trace clock, from perf/wall_s and perf/time_per_step; `shifts`: the
    resumed sessions' (resumed_after_step, shift) from `session_shifts`."""
    if not {"perf/wall_s", "perf/time_per_step"} <= set(metrics.columns):
        return {}
    total = metrics["timing_s/step"] if "timing_s/step" in metrics.columns else metrics["perf/time_per_step"]
    spans = {}
    for step, wall, per_step, whole in zip(
        metrics["step"], metrics["perf/wall_s"], metrics["perf/time_per_step"], total
    ):
        if math.isnan(wall) or math.isnan(per_step):  # a val-only row has no step time
            continue
        start = wall - per_step + shift_of(shifts, step)
        spans[int(step)] = (start, start + (per_step if math.isnan(whole) else whole))
    return spans


def _trace_step_spans(events: list[dict]) -> dict[int, tuple[float, float]]:
    """step -> (start_s, end_s) from events whose args carry a step (or batch) number."""
    spans: dict[int, tuple[float, float]] = {}
    for ev in events:
        args = ev.get("args") or {}
        step = args.get("step", args.get("batch"))
        if ev.get("ph") != "X" or not isinstance(step, (int, float)) or "ts" not in ev:
            continue
        start = ev["ts"] / 1e6
        end = start + ev.get("dur", 0.0) / 1e6
        old = spans.get(int(step))
        spans[int(step)] = (min(old[0], start), max(old[1], end)) if old else (start, end)
    return spans


def _choose(spans: dict, steps: tuple[int, int] | None) -> dict:
    if steps is None:
        ordered = sorted(spans)
        steps = DEFAULT_STEPS if len(ordered) > DEFAULT_STEPS[1] - DEFAULT_STEPS[0] + 1 else (ordered[0], ordered[-1])
        if not any(steps[0] <= k <= steps[1] for k in spans):
            steps = (ordered[0], ordered[min(2, len(ordered) - 1)])
    return {k: v for k, v in spans.items() if steps[0] <= k <= steps[1]}


def timeline_figure(panels: list[TimelinePanel]):
    """A Gantt chart: one panel per run, one lane per component; returns the Figure.

    Each lane of a panel is one PolyCollection (labelled 'generation', 'reward', 'training', or the
    lane name) holding one rectangle per span.

    The panels share one time axis, from 0 to the end of the longest window, so every panel shows all of
    its own window and a second is as wide in each (a slower mode's steps take more of the width).
    """
    fig, axes = new_figure(len(panels), 1, width=10.0, height=1.2 + 1.6 * len(panels), squeeze=False, sharex=True)
    right = max([_panel_end(panel) for panel in panels] + [1e-6])
    for ax, panel in zip(axes[:, 0], panels):
        _draw_panel(ax, panel, right)
    axes[-1, 0].set_xlim(0, right)
    axes[-1, 0].set_xlabel("seconds from window start")
    return fig


def _panel_end(panel: TimelinePanel) -> float:
    """Seconds from the window start to the panel's last span end (or its last step start)."""
    ends = [*panel.step_starts.values()]
    if not panel.events.empty:
        ends.append(float(panel.events["end_s"].max()))
    return max(ends, default=0.0)


def _draw_panel(ax, panel: TimelinePanel, right: float) -> None:
    from matplotlib.collections import PolyCollection

    ax.set_title(panel.title, fontsize="medium", loc="left")
    events = panel.events
    if events.empty:
        note_axes(ax, "no spans in this window")
        return
    # a span shorter than ~2 pixels would vanish; draw it that wide (a rule reward takes microseconds)
    min_width = right / 500
    present = list(events["lane"].unique())
    lanes = [lane for lane in LANES if lane in present] + sorted(lane for lane in present if lane not in LANES)
    for y, lane in enumerate(lanes):
        spans = events[events["lane"] == lane].sort_values("start_s")
        rows = _subrows(spans["start_s"].tolist(), spans["end_s"].tolist())
        height = 0.8 / (max(rows) + 1)
        verts = []
        for start, end, row in zip(spans["start_s"], spans["end_s"], rows):
            end = max(end, start + min_width)
            low = y - 0.4 + row * height
            verts.append([(start, low), (end, low), (end, low + height), (start, low + height)])
        label, face = LANES.get(lane, (lane, "tab:gray"))
        coll = PolyCollection(verts, facecolors=face, edgecolors="white", linewidths=0.3, label=label)
        ax.add_collection(coll)
    for step, start in panel.step_starts.items():
        ax.axvline(start, color="0.5", linestyle=":", linewidth=0.8)
        ax.text(start, -0.6, f" step {step}", fontsize="x-small", color="0.3", va="center")
    ax.set_yticks(range(len(lanes)), [LANES.get(lane, (lane,))[0] for lane in lanes])
    ax.set_ylim(-0.75, len(lanes) - 0.5)
    ax.invert_yaxis()


def _subrows(starts: list[float], ends: list[float]) -> list[int]:
    """Greedy interval colouring: each span goes to the lowest sub-row free at its start."""
    free: list[int] = []  # sub-rows whose last span has ended
    busy: list[tuple[float, int]] = []  # (end, row) heap
    rows: list[int] = []
    used = 0
    for start, end in zip(starts, ends):
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            row = heapq.heappop(free)
        elif used < _MAX_SUBROWS:
            row, used = used, used + 1
        else:
            row = len(rows) % _MAX_SUBROWS  # very many at once: share rows rather than shrink to lines
        heapq.heappush(busy, (end, row))
        rows.append(row)
    return rows
