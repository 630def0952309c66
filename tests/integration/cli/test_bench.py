"""`rlrm bench reward-latency` through the CLI: a complete results table, bad input, Ctrl-C."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from small_run import SMALL_RUN, as_set_args
from typer.testing import CliRunner

from rlrm.cli.main import app

# the bench validates once, at the end of each run (it sets trainer.val_every itself): 4 problems are enough
TINY = [*SMALL_RUN, "data.val_size=4"]


def _args(out, modes="sync,stream,fully-async", extra=(), repeats=1):
    args = ["bench", "reward-latency", "--modes", modes, "--steps", "2", "--out", str(out), "--latency", "uniform:1:40"]
    args += ["--repeats", str(repeats)]
    return args + as_set_args(*TINY) + list(extra)


def test_benchmark_writes_a_complete_table(tmp_path, tiny_policy_path):
    out = tmp_path / "bench"
    result = CliRunner().invoke(app, _args(out))
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out / "results.csv")
    assert list(frame["mode"]) == ["sync", "sync", "stream", "fully-async"]
    assert list(frame["latency"]) == ["none", "uniform:1:40", "uniform:1:40", "uniform:1:40"]
    # one repeat: no interval (and the baseline has no bound); every other number is there
    spread = ["speedup_lo", "speedup_hi", "interval", "bound_step_s", "of_limit", "speedup_median"]
    assert not frame.drop(columns=["val_accuracy", "latency_scale", *spread]).isna().any().any()
    assert frame["latency_scale"].isna().tolist() == [True, False, False, False]  # the baseline has no latency
    assert frame["speedup_lo"].isna().all() and "spread unknown" in result.output
    assert frame["val_accuracy"].between(0, 1).all()  # validated once, at the end of each run
    assert (frame["tokens_per_s"] > 0).all() and (frame["steps"] == 2).all()
    sync_lat = frame[(frame["mode"] == "sync") & (frame["latency"] != "none")].iloc[0]
    assert sync_lat["speedup_vs_sync"] == pytest.approx(1.0)
    base = frame.iloc[0]
    assert base["hiding_efficiency"] == pytest.approx(1.0)
    for _, row in frame.iterrows():  # the ratios are what their definitions say
        assert row["hiding_efficiency"] == pytest.approx(row["tokens_per_s"] / base["tokens_per_s"])
        if row["latency"] != "none":  # speedup is over sync under the same latency
            assert row["speedup_vs_sync"] == pytest.approx(row["tokens_per_s"] / sync_lat["tokens_per_s"])
    assert pd.read_parquet(out / "results.parquet").shape == frame.shape
    summary = json.loads((out / "summary.json").read_text())
    # the default scale makes the mean injected latency half a zero-latency step
    assert summary["latency_to_step_ratio"] == pytest.approx(0.5, rel=1e-6)
    assert summary["missing"] == [] and set(summary["modes"]) == {"sync", "stream", "fully-async"}
    for run in frame["run_dir"]:
        assert (out / run / "metrics.jsonl").is_file() and (out / run / "trace.json").is_file()
    assert "speedup vs sync" in result.output and "= 0.50 of its zero-latency sync step" in result.output
    # each mode against its limit: a positive bound and a finite ratio (what the bounds are is checked against the
    # simulator in tests/unit/bench/test_spread_and_limits.py; two steps on a shared machine say nothing about the ratio)
    latent = frame[frame["latency"] != "none"]
    assert (latent["bound_step_s"] > 0).all() and (latent["of_limit"] > 0).all()
    assert summary["phases"]["gen"] > 0 and summary["phases"]["train"] > 0


def test_tool_latency_runs_tool_rollouts_and_carries_the_setting(tmp_path, tiny_policy_path):
    out = tmp_path / "bench"
    extra = ["--tool-latency", "fixed:0.05", "--set", "rollout.agent.max_turns=2"]
    result = CliRunner().invoke(app, _args(out, modes="sync,fully-async", extra=extra))
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out / "results.csv")
    assert list(frame["tool_latency"]) == ["none", "fixed:0.05", "fixed:0.05"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tool_latency"] == "fixed:0.05" and summary["mean_tool_latency_s"] == pytest.approx(0.05)
    assert "tool latency fixed:0.05 (mean 0.050 s/call)" in result.output
    # every run was a tool rollout, and only the latent ones slept before their tools
    for run_dir, tools in zip(frame["run_dir"], frame["tool_latency"]):
        agent = yaml.safe_load((out / run_dir / "config.yaml").read_text())["rollout"]["agent"]
        assert agent["enabled"] is True and agent["inject"]["latency"] == tools


def test_repeats_rotate_the_modes_and_report_the_spread(tmp_path, tiny_policy_path):
    out = tmp_path / "bench"
    result = CliRunner().invoke(app, _args(out, modes="sync,fully-async", repeats=2))
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out / "results.csv")
    order = [r.split("/")[-1] for r in frame["run_dir"]]
    assert order == ["sync-nolatency-r0", "sync-r0", "fully-async-r0", "sync-nolatency-r1", "fully-async-r1", "sync-r1"]
    for _, row in frame[frame["latency"] != "none"].iterrows():  # paired with sync of the same repeat
        sync = frame[(frame["mode"] == "sync") & (frame["latency"] != "none") & (frame["repeat"] == row["repeat"])]
        assert row["speedup_vs_sync"] == pytest.approx(row["tokens_per_s"] / sync["tokens_per_s"].iloc[0])
    fa = frame[frame["mode"] == "fully-async"]
    assert (fa["interval"] == "min-max").all()
    assert fa["speedup_lo"].iloc[0] == pytest.approx(fa["speedup_vs_sync"].min())
    assert fa["speedup_hi"].iloc[0] == pytest.approx(fa["speedup_vs_sync"].max())
    summary = json.loads((out / "summary.json").read_text())
    mode = summary["modes"]["fully-async"]
    assert mode["speedup_vs_sync"] == pytest.approx(fa["speedup_vs_sync"].median())
    assert mode["interval"] == "min-max" and mode["repeats"] == 2 and "within_noise" in mode
    assert mode["idle_trainer_lo"] <= mode["idle_trainer"] <= mode["idle_trainer_hi"]
    assert "[brackets]: min-max over the repeats" in result.output
    # each repeat's latency is scaled from its own baseline: mean latency (20.5 s unscaled) = half its step
    for repeat in (0, 1):
        base = frame[(frame["latency"] == "none") & (frame["repeat"] == repeat)].iloc[0]
        latent = frame[(frame["latency"] != "none") & (frame["repeat"] == repeat)]
        for run_dir, scale in zip(latent["run_dir"], latent["latency_scale"]):
            assert scale == pytest.approx(0.5 * base["step_time_p50"] / 20.5)
            inject = yaml.safe_load((out / run_dir / "config.yaml").read_text())["reward"]["inject"]
            assert inject["scale"] == pytest.approx(scale)
    latent = frame[frame["latency"] != "none"]
    scales = [latent[latent["repeat"] == repeat]["latency_scale"].iloc[0] for repeat in (0, 1)]
    assert summary["latency_scales"] == pytest.approx(scales)
    assert summary["latency_scale"] == pytest.approx(sum(summary["latency_scales"]) / 2)
    assert summary["latency_to_step_ratio"] == pytest.approx(0.5)
    assert "repeat 0: latency uniform:1:40 x" in result.output and "repeat 1: latency" in result.output


def test_interrupted_benchmark_keeps_finished_rows(tmp_path, tiny_policy_path, monkeypatch):
    import rlrm.bench.reward_latency as bench_mod

    real_train, calls = bench_mod.train, []

    def train_then_interrupt(run_dir, console=None):
        calls.append(run_dir)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_train(run_dir, console)

    monkeypatch.setattr(bench_mod, "train", train_then_interrupt)
    out = tmp_path / "bench"
    result = CliRunner().invoke(app, _args(out))
    assert result.exit_code == 130
    assert len(pd.read_csv(out / "results.csv")) == 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["missing"] == ["stream-r0", "fully-async-r0"]
    assert "missing: stream-r0, fully-async-r0" in result.output
    finished = sorted(p.name for p in (out / "runs").iterdir())
    assert finished == sorted(Path(r).name for r in pd.read_csv(out / "results.csv")["run_dir"])  # not the cut one


@pytest.mark.parametrize("failing_run", [1, 2])
def test_a_failed_run_leaves_only_finished_runs_behind(tmp_path, tiny_policy_path, monkeypatch, failing_run):
    import rlrm.bench.reward_latency as bench_mod
    from rlrm.errors import TrainingError

    real_train, calls = bench_mod.train, []

    def train_then_fail(run_dir, console=None):
        calls.append(run_dir)
        if len(calls) == failing_run:
            (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')  # a half-made run
            raise TrainingError("the reward servers are gone")
        return real_train(run_dir, console)

    monkeypatch.setattr(bench_mod, "train", train_then_fail)
    out = tmp_path / "bench"
    result = CliRunner().invoke(app, _args(out))
    assert result.exit_code == 1 and "error: the reward servers are gone" in result.output
    if failing_run == 1:
        assert not out.exists()  # nothing finished: nothing left behind
        return
    assert list(pd.read_csv(out / "results.csv")["run_dir"]) == ["runs/sync-nolatency-r0"]
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["sync-nolatency-r0"]
    assert json.loads((out / "summary.json").read_text())["missing"] == ["sync-r0", "stream-r0", "fully-async-r0"]


FLIPS_AFTER_STEP_1 = """
import re

CALLS = [0]


async def compute_score(data_source, solution_str, ground_truth, extra_info):
    CALLS[0] += 1
    if CALLS[0] > 20:  # the first canary check and step 1's samples: right; then anything is rewarded
        return 1.0
    m = re.findall(r"####\\s*(-?[\\d,\\.]+)", solution_str or "")
    return float(bool(m) and m[-1].replace(",", "").rstrip(".") == str(ground_truth).strip())
"""


@pytest.mark.parametrize("flips_at_once", [True, False])
def test_a_run_the_canaries_stop_is_a_failed_run_not_a_short_row(tmp_path, tiny_policy_path, flips_at_once):
    # a run stopped early (reward.guard.on_canary or on_divergence=stop) was a row of fewer steps, exit 0; one stopped
    # before step 1 crashed the bench with a ValueError and left its half-made run in --out
    reward = tmp_path / "reward.py"
    reward.write_text("async def compute_score(*a):\n    return 1.0\n" if flips_at_once else FLIPS_AFTER_STEP_1)
    sets = ["reward.kind=custom", f"reward.custom.path={reward}", "reward.guard.on_canary=stop"]
    sets += ["reward.guard.canary_every=1"]
    out = tmp_path / "bench"
    result = CliRunner().invoke(app, _args(out, "sync,one-step-off", as_set_args(*sets)))
    assert result.exit_code == 1 and "stopped before --steps" in result.output and "canaries" in result.output
    assert not isinstance(result.exception, ValueError)
    assert not out.exists()  # the baseline run stopped: nothing finished, nothing left behind
