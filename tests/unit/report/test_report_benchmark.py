"""Benchmark figures: bar heights are the per-mode medians of results.csv (two repeats: their means); latency
histogram and CDF."""

from __future__ import annotations

import csv
from statistics import mean

import numpy as np
import pytest
from matplotlib.container import BarContainer, ErrorbarContainer

from rlrm.report import benchmark
from rlrm.report.figures import FigureSkipped
from rlrm.report.folders import load_folder

MODES = ["sync", "stream", "one-step-off"]


def csv_means(folder, column):
    """Per-mode mean of a results.csv column, the zero-latency baseline excluded."""
    rows = [r for r in csv.DictReader((folder / "results.csv").open()) if r["latency"] != "none"]
    return [mean(float(r[column]) for r in rows if r["mode"] == m) for m in MODES]


def heights(container):
    return [patch.get_height() for patch in container.patches]


def bars(ax):
    return [c for c in ax.containers if isinstance(c, BarContainer)]


def test_throughput_and_speedup_bars(folders, notes):
    bench = load_folder(folders["bench"], notes)
    fig = benchmark.throughput_figure(bench)
    tput_ax, speed_ax = fig.axes
    # synthetic: tokens/s = 500 * (1 + 0.5*m + 0.1*repeat) -> means over repeats 0, 1: 525, 775, 1025
    assert heights(bars(tput_ax)[0]) == pytest.approx([525.0, 775.0, 1025.0])
    assert heights(bars(tput_ax)[0]) == pytest.approx(csv_means(folders["bench"], "tokens_per_s"))
    assert heights(bars(speed_ax)[0]) == pytest.approx(csv_means(folders["bench"], "speedup_vs_sync"))
    assert [t.get_text() for t in tput_ax.get_xticklabels()] == MODES
    # the zero-latency baseline is a reference line at the mean of its repeats (1000, 1010)
    assert [line.get_ydata()[0] for line in tput_ax.get_lines() if "no latency" in line.get_label()] == [1005.0]
    # error bars span min..max of the repeats: sync 500..550
    errorbars = next(c for c in tput_ax.containers if isinstance(c, ErrorbarContainer))
    segs = errorbars.lines[2][0].get_segments()
    assert segs[0][:, 1].tolist() == pytest.approx([500.0, 550.0])


def test_idle_grouped_bars(folders, notes):
    bench = load_folder(folders["bench"], notes)
    ax = benchmark.idle_figure(bench).axes[0]
    grouped = bars(ax)
    assert [c.get_label() for c in grouped] == ["trainer", "rollout", "reward wait"]
    for container, col in zip(grouped, ("idle_trainer", "idle_rollout", "idle_reward_wait")):
        assert heights(container) == pytest.approx(csv_means(folders["bench"], col))


def test_hiding_efficiency_bars(folders, notes):
    bench = load_folder(folders["bench"], notes)
    ax = benchmark.hiding_figure(bench).axes[0]
    assert heights(bars(ax)[0]) == pytest.approx(csv_means(folders["bench"], "hiding_efficiency"))


def test_step_time_breakdown_stacks_phase_means(folders, notes):
    bench = load_folder(folders["bench"], notes)
    ax = benchmark.step_time_figure(bench).axes[0]
    labels = [c.get_label() for c in ax.containers]
    assert labels == ["gen", "reward", "old_log_prob", "adv", "update_actor", "update_weights"]
    # synthetic runs under latency: gen 0.4 s, reward 0.5 s, then the trainer phases, every step
    assert heights(ax.containers[0]) == pytest.approx([0.4] * 3)
    assert heights(ax.containers[1]) == pytest.approx([0.5] * 3)
    tops = [p.get_y() + p.get_height() for p in ax.containers[-1].patches]
    assert tops == pytest.approx([0.4 + 0.5 + 0.2 + 0.01 + 0.8 + 0.01] * 3)


def test_latency_histogram_and_cdf_use_every_reward_event(folders, notes):
    bench = load_folder(folders["bench"], notes)
    latencies = benchmark.injected_latencies(bench, notes)
    # 2 repeats x 5 steps x 4 reward spans per step, per mode
    assert list(latencies) == MODES and all(len(v) == 40 for v in latencies.values())
    hist_ax, cdf_ax = benchmark.latency_figure(latencies).axes
    assert [line.get_label() for line in cdf_ax.get_lines()] == MODES
    cdf = cdf_ax.get_lines()[0]
    np.testing.assert_allclose(cdf.get_xdata(), np.sort(latencies["sync"]))
    assert cdf.get_ydata()[-1] == 1.0
    assert len(hist_ax.patches) == 3  # one step histogram per mode


def test_missing_columns_skip_the_figure(folders, notes):
    bench = load_folder(folders["bench"], notes)
    bench.results = bench.results.drop(columns=["idle_trainer", "idle_rollout", "idle_reward_wait"])
    with pytest.raises(FigureSkipped, match="idle_trainer"):
        benchmark.idle_figure(bench)
    with pytest.raises(FigureSkipped):
        benchmark.latency_figure({})


def test_distinct_latencies_merge_identical_draws_by_hand():
    same = np.array([1.0, 2.0, 3.0])
    latencies = {
        "sync @ 1": same,
        "stream @ 1": same[::-1].copy(),  # the same draws in another order: the same distribution
        "sync @ 2": same * 2,
        "stream @ 2": same * 2 + 0.5,  # another distribution at the same point stays apart
    }
    merged = benchmark.distinct_latencies(latencies)
    assert list(merged) == ["every mode (2) @ 1", "sync @ 2", "stream @ 2"]
    np.testing.assert_allclose(merged["sync @ 2"], same * 2)
    assert list(benchmark.distinct_latencies({"sync": same, "stream": same, "fully-async": same * 3})) == [
        "sync, stream",  # not every mode of the folder: named one by one
        "fully-async",
    ]


def test_bar_width_is_capped_and_crowded_labels_turn():
    assert benchmark.bar_width(3) == 6.0 and benchmark.bar_width(30) == benchmark.MAX_WIDTH_IN
    from rlrm.report.figures import new_figure

    _, ax = new_figure()
    benchmark.category_ticks(ax, ["sync", "stream", "one-step-off"])
    assert {t.get_rotation() for t in ax.get_xticklabels()} == {0.0}
    benchmark.category_ticks(ax, [f"one-step-off @ {i}" for i in range(12)])  # 12 x ~15 characters in 8 inches
    assert {t.get_rotation() for t in ax.get_xticklabels()} == {45.0}


def test_the_step_time_breakdown_is_per_trained_step():
    # a phase only some rows hold (a one-off validation, a reward wait that did not happen that step) was averaged
    # over those rows alone: shown as if it ran every step
    from types import SimpleNamespace

    import pandas as pd

    from rlrm.report.folders import metrics_frame

    rows = [{"step": 0, "val/accuracy": 0.0}]
    for step in (1, 2, 3, 4):
        row = {"step": step, "timing_s/update_actor": 0.1, "timing_s/step": 0.2}
        if step in (1, 4):
            row.update({"timing_s/reward": 0.4, "timing_s/step": 0.6})
        if step == 4:
            row.update({"timing_s/testing": 2.0, "timing_s/step": 2.6})
        rows.append(row)
    bench = SimpleNamespace(
        results=pd.DataFrame({"mode": ["one-step-off"], "latency": ["fixed:0.4"], "run_dir": ["r"]}),
        runs={"r": SimpleNamespace(metrics=metrics_frame(rows))},
    )
    got = benchmark.step_time_table(bench).loc["one-step-off"]
    want = {"reward": 0.2, "testing": 0.5, "update_actor": 0.1, "step": 0.9}
    assert {k: round(got[k], 3) for k in want} == pytest.approx(want)


# Parts of a phase (benchmark.SUB_PHASES): a colocated judge's wake and sleep are timed inside timing_s/reward
# (rlrm/engine/scheduling/sync.py), a server weight sync's write, load or broadcast inside timing_s/update_weights
# (rlrm/engine/weights.py around rlrm/launch/client/rollout_engine.py). Stacked on top they counted their seconds
# twice: a sync step, where nothing overlaps, drew taller than the step it measured.
PARTS = {
    "colocated judge": {"timing_s/reward_wake": 0.5, "timing_s/reward_sleep": 0.5},
    "canaries after the step": {"timing_s/canary": 2.0},
    "disk weight sync": {"timing_s/weight_write": 0.4, "timing_s/weight_load": 0.6, "timing_s/weight_broadcast": 0.0},
    "broadcast weight sync": {
        "timing_s/weight_write": 0.0,
        "timing_s/weight_load": 0.0,
        "timing_s/weight_broadcast": 1.0,
    },
}


def sync_rows(parts: dict) -> list[dict]:
    """Two sync steps, their phases one after another and nothing else: the step is their sum."""
    top = {"timing_s/gen": 1.0, "timing_s/reward": 3.0, "timing_s/update_actor": 1.0, "timing_s/update_weights": 1.0}
    return [{"step": step, **top, "timing_s/step": sum(top.values()), **parts} for step in (1, 2)]


def sync_bench(parts: dict):
    from types import SimpleNamespace

    import pandas as pd

    from rlrm.report.folders import metrics_frame

    return SimpleNamespace(
        results=pd.DataFrame({"mode": ["sync"], "latency": ["fixed:2"], "run_dir": ["r"]}),
        runs={"r": SimpleNamespace(metrics=metrics_frame(sync_rows(parts)))},
    )


@pytest.mark.parametrize("case", list(PARTS))
def test_a_sync_steps_stack_is_its_measured_step_with_parts_of_phases_inside_them(case):
    parts = PARTS[case]
    ax = benchmark.step_time_figure(sync_bench(parts)).axes[0]
    top = max(p.get_y() + p.get_height() for c in bars(ax) for p in c.patches)
    assert top == pytest.approx(6.0, abs=1e-9)  # the measured step (the black tick): nothing hidden in sync
    segment = {c.get_label(): c.patches[0] for c in bars(ax)}
    assert [c.get_label() for c in bars(ax) if c.get_label() in benchmark.PHASE_ORDER] == [
        "gen",
        "reward",
        "update_actor",
        "update_weights",
    ]
    for key, seconds in parts.items():
        part = key.removeprefix("timing_s/")
        if part in benchmark.AFTER_STEP:  # between two steps: in the table, not in the step's stack
            assert benchmark.phase_label(part) not in segment
            assert benchmark.step_time_table(sync_bench(parts)).loc["sync", part] == seconds
            continue
        drawn, whole = segment[benchmark.phase_label(part)], segment[benchmark.SUB_PHASES[part]]
        assert drawn.get_height() == pytest.approx(seconds)
        assert whole.get_y() - 1e-9 <= drawn.get_y()
        assert drawn.get_y() + drawn.get_height() <= whole.get_y() + whole.get_height() + 1e-9
        assert drawn.get_width() < whole.get_width()  # narrower: it is seen as a part, not a phase of its own


def test_a_part_is_drawn_no_taller_than_its_phase():
    # the first step after a resume holds the resume's weight write, which no update_weights timed
    ax = benchmark.step_time_figure(sync_bench({"timing_s/weight_write": 1.5})).axes[0]
    assert max(p.get_y() + p.get_height() for c in bars(ax) for p in c.patches) == pytest.approx(6.0)
    assert benchmark.step_time_table(sync_bench({"timing_s/weight_write": 1.5})).loc["sync", "weight_write"] == 1.5


def test_the_step_time_table_puts_each_part_after_its_phase_and_marks_it(tmp_path):
    import json

    from rlrm.report import sections
    from rlrm.report.document import Document
    from rlrm.report.html import to_html
    from rlrm.report.synthetic import write_bench

    table = benchmark.step_time_table(sync_bench({**PARTS["colocated judge"], **PARTS["disk weight sync"]}))
    assert list(table.columns) == [
        "gen",
        "reward",
        "reward_wake",
        "reward_sleep",
        "update_actor",
        "update_weights",
        "weight_write",
        "weight_load",
        "weight_broadcast",
        "step",
    ]
    assert table.loc["sync", "reward_wake"] == 0.5 and table.loc["sync", "weight_load"] == 0.6

    # the report's table (summary.md and report.html) names the phase each part belongs to
    folder = write_bench(tmp_path / "bench", modes=("sync",), repeats=1, steps=2)
    for metrics in folder.glob("runs/*/metrics.jsonl"):
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        rows = [{**r, **PARTS["colocated judge"]} if r["step"] > 0 else r for r in rows]
        metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert len(list(folder.glob("runs/*/metrics.jsonl"))) == 2  # the mode's run and the baseline's

    class NoFigures:
        def __init__(self, notes):
            self.notes = notes

        def emit(self, section, name, make) -> bool:
            return False

    doc = Document("report")
    sections.bench_section(doc, load_folder(folder, doc.notes), "bench", None, NoFigures(doc.notes))
    page = to_html(doc)
    assert "<th>reward_wake (part of reward)</th><th>reward_sleep (part of reward)</th>" in page
    assert "<th>reward</th>" in page and "<th>gen</th>" in page  # a phase of its own is not marked
    assert "reward_wake (part of reward)" in doc.to_markdown()
