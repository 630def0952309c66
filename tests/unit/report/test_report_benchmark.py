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
