"""A simulated sweep (`rlrm bench simulate --sweep`) in the report: speedup, throughput and idle per mode against the
swept value (lines, not a bar per mode and value), every figure at most MAX_WIDTH_IN wide, identical latencies drawn
once."""

from __future__ import annotations

import pandas as pd
import pytest

from rlrm.bench.simulate.run import run_simulation
from rlrm.bench.simulate.spec import load_spec, parse_sweep
from rlrm.report import benchmark, sweep
from rlrm.report.build import ReportOptions, build_report
from rlrm.report.folders import load_folder

SPEC = [
    "modes=[sync,stream,one-step-off]",
    "workload.steps=4",
    "workload.prompts_per_step=4",
    "workload.samples_per_prompt=2",
    "workload.mini_batch_prompts=2",
    "workload.response_tokens=uniform:5:30",
    "workload.max_response_tokens=32",
    "rollout.iteration_s=0.01",
    "trainer.minibatch_s=0.2",
    "reward.latency=fixed:1",
    "output.trace_detail_steps=4",
]


@pytest.fixture(scope="module")
def sweep_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "sim"
    run_simulation(load_spec(overrides=SPEC), out, sweep=parse_sweep("reward.latency_scale=0,0.5,2"))
    return out


def test_sweep_figure_draws_each_mode_against_the_mean_latency(sweep_folder):
    bench = load_folder(sweep_folder, [])
    fig = sweep.sweep_figure(bench)
    speed_ax = fig.axes[0]
    results = pd.read_csv(sweep_folder / "results.csv")
    modes = results[results["latency"] != "none"]
    lines = {line.get_label(): line for line in speed_ax.get_lines() if not line.get_label().startswith("_")}
    assert list(lines) == ["sync", "stream", "one-step-off"]
    for mode, line in lines.items():
        mine = modes[modes["mode"] == mode].sort_values("mean_latency_s")
        assert line.get_xdata().tolist() == pytest.approx([0.0, 0.5, 2.0])  # fixed:1 x scale: the mean latency
        assert line.get_ydata().tolist() == pytest.approx(mine["speedup_vs_sync"].tolist())
    assert lines["sync"].get_ydata().tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert speed_ax.get_xlabel() == "mean reward latency (s)"


def test_report_of_a_sweep_labels_points_and_keeps_one_timeline(sweep_folder, tmp_path):
    result = build_report([sweep_folder], ReportOptions(out=tmp_path / "r"))
    names = {p.name for p in result.files}
    assert {"bench_sweep.png", "bench_throughput.png", "bench_timeline.png"} <= names
    summary = result.summary.read_text()
    assert "simulated by rlrm bench simulate" in summary and "one-step-off @ 2" in summary
    bench = load_folder(sweep_folder, [])
    table = benchmark.mode_table(bench)
    assert len(table) == 3 * 3  # a bar per mode and sweep point


WIDE = [s if not s.startswith("modes=") else "modes=[sync,stream,pipeline,one-step-off,fully-async]" for s in SPEC]


@pytest.fixture(scope="module")
def wide_sweep(tmp_path_factory):
    """5 modes x 6 points: 30 `mode @ value` categories, what made 4,200-px bar figures."""
    out = tmp_path_factory.mktemp("wide") / "sim"
    run_simulation(load_spec(overrides=WIDE), out, sweep=parse_sweep("reward.latency_scale=0,0.25,0.5,1,2,4"))
    return out


def test_every_figure_of_a_wide_sweep_fits_the_width_cap(wide_sweep, tmp_path):
    from PIL import Image

    result = build_report([wide_sweep], ReportOptions(out=tmp_path / "r"))
    pngs = [p for p in result.files if p.suffix == ".png"]
    assert {"bench_throughput", "bench_idle", "bench_step_time", "bench_latency"} <= {p.stem for p in pngs}
    widths = {p.stem: Image.open(p).size[0] for p in pngs}
    assert max(widths.values()) <= benchmark.MAX_WIDTH_IN * 100, widths  # saved at 100 dpi


def test_a_sweeps_throughput_and_idle_are_a_line_per_mode(wide_sweep):
    bench = load_folder(wide_sweep, [])
    modes = ["sync", "stream", "pipeline", "one-step-off", "fully-async"]
    tput = sweep.throughput_figure(bench)
    idle = sweep.idle_figure(bench)
    assert [ax.get_title() for ax in idle.axes] == ["Trainer idle", "Rollout idle", "Reward wait"]
    results = pd.read_csv(wide_sweep / "results.csv")
    rows = results[results["latency"] != "none"]
    for ax, col in [(tput.axes[0], "tokens_per_s"), *zip(idle.axes, sweep.IDLE)]:
        lines = [line for line in ax.get_lines() if line.get_label() in modes]
        assert [line.get_label() for line in lines] == modes  # one line each, no bar per mode and value
        assert all(len(line.get_xdata()) == 6 for line in lines)
        sync = rows[rows["mode"] == "sync"].sort_values("mean_latency_s")[col].tolist()
        assert lines[0].get_ydata().tolist() == pytest.approx(sync)


def test_step_time_bars_of_a_wide_sweep_turn_their_labels(wide_sweep):
    ax = benchmark.step_time_figure(load_folder(wide_sweep, [])).axes[0]
    labels = ax.get_xticklabels()
    assert len(labels) == 30 and {label.get_rotation() for label in labels} == {45.0}
    assert ax.figure.get_figwidth() <= benchmark.MAX_WIDTH_IN


def test_identical_latencies_are_drawn_once_and_said(wide_sweep):
    bench = load_folder(wide_sweep, [])
    latencies = benchmark.injected_latencies(bench, [])
    assert len(latencies) == 5 * 5  # every mode at each of the five non-zero points: the same seeded draws
    fig = benchmark.latency_figure(latencies)
    cdf = fig.axes[1]
    assert [line.get_label() for line in cdf.get_lines()] == [
        f"every mode (5) @ {v}" for v in (0.25, 0.5, 1.0, 2.0, 4.0)
    ]
    assert "5 distinct of 25" in fig.get_suptitle()
