"""A simulated sweep (`rlrm bench simulate --sweep`) in the report: speedup per mode against the swept value."""

from __future__ import annotations

import pandas as pd
import pytest

from rlrm.bench.simulate.run import run_simulation
from rlrm.bench.simulate.spec import load_spec, parse_sweep
from rlrm.report import benchmark
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
    fig = benchmark.sweep_figure(bench)
    speed_ax = fig.axes[0]
    results = pd.read_csv(sweep_folder / "results.csv")
    modes = results[results["latency"] != "none"]
    lines = {line.get_label(): line for line in speed_ax.get_lines()}
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
