"""`rlrm bench reward-latency` settings checked before anything runs (the loop's concurrency, one-line bad inputs), and
the warning under the table when the runs were too short for a steady state."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from rlrm.cli.main import app


@pytest.mark.parametrize(("overrides", "expected"), [([], 256), (["reward.max_concurrency=8"], 8)])
def test_reward_loop_concurrency_leaves_room_for_every_sample_in_flight(tmp_path, overrides, expected):
    # tiny-rule: 32 prompts x 8 samples, max_staleness 2, 4 workers: up to 4 batches in flight
    # = 1024 samples, 256 per worker; an explicit --set wins.
    from rlrm.bench.reward_latency import RewardLatencyBench

    bench = RewardLatencyBench(
        profile="tiny-rule",
        modes=["fully-async"],
        latency="uniform:1:40",
        steps=1,
        repeats=1,
        seed=0,
        out=tmp_path / "b",
        overrides=overrides,
    )
    assert bench._profile_for("fully-async", 0, 0.01).reward.max_concurrency == expected
    assert bench.summary()["reward_max_concurrency"] == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--modes", "sync,warp"], "unknown mode(s) warp"),
        (["--modes", "sync,stream,sync"], "--modes names sync twice; name each mode once"),
        (["--latency", "uniform:5"], "accepted"),
        (["--latency", "trace:/nope.csv"], "/nope.csv"),
        (["--set", "trainer.max_staleness=-1"], "trainer.max_staleness"),
        (["--set", "reward.inject.fail_rate=1.5"], "[0, 1]"),
        (["--latency", "none"], "latency is zero"),
        (["--tool-latency", "fixd:1"], "--tool-latency: bad latency spec 'fixd:1': unknown kind 'fixd'"),
        (
            ["--modes", "sync", "--repeats", "1000000"],
            "--repeats 1000000 would start 2000000 training runs; at most 100 repeats",
        ),
        (
            ["--tool-latency", "fixed:1", "--set", "rollout.agent.enabled=false"],
            "--tool-latency needs tool rollouts, and --set rollout.agent.enabled=false turns them off",
        ),
    ],
)
def test_bad_input_is_one_line_and_runs_nothing(tmp_path, args, message):
    out = tmp_path / "bench"
    result = CliRunner().invoke(app, ["bench", "reward-latency", "--out", str(out), *args])
    assert result.exit_code == 1
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert not out.exists()


def _summary(steps: int, of_limits: dict[str, float], max_staleness: int = 2) -> dict:
    def stats(of_limit: float) -> dict:
        return {"tokens_per_s": 1000.0, "speedup_vs_sync": 1.5, "hiding_efficiency": 1.08, "of_limit": of_limit}

    return {
        "latency": "uniform:1:40",
        "mean_latency_s": 0.4,
        "repeats": 1,
        "steps": steps,
        "max_staleness": max_staleness,
        "baseline": {"tokens_per_s": 1200.0},
        "modes": {mode: stats(value) for mode, value in of_limits.items()},
    }


def test_a_run_too_short_for_the_pipeline_is_warned_about():
    from rlrm.bench.reward_latency import short_run_warning

    # the tester's run: --steps 3, max_staleness 2: fully-async generated all 3 batches during step 1
    said = short_run_warning(_summary(3, {"sync": 0.9, "fully-async": 1.39}))
    assert said.startswith("--steps 3 is too short for a steady state: fully-async generates 3 batches in step 1")
    assert "of limit above 1 (faster than its own lower bound): fully-async 1.39" in said
    assert said.endswith("raise --steps (e.g. --steps 20)")
    # steps <= max_ahead + 2 alone: one-step-off runs 1 batch ahead, so 3 steps are too few and 4 are enough
    assert "one-step-off generates 2 batches" in short_run_warning(_summary(3, {"one-step-off": math.nan}))
    assert short_run_warning(_summary(4, {"one-step-off": math.nan, "sync": 0.95})) is None
    # an on-policy mode faster than its bound is warned about whatever the steps
    assert "sync 1.05" in short_run_warning(_summary(40, {"sync": 1.05, "fully-async": 0.9}))
    assert short_run_warning(_summary(10, {"sync": 0.95, "fully-async": 0.9, "stream": None})) is None


def test_the_command_prints_the_short_run_warning(tmp_path, monkeypatch):
    from rlrm.bench.reward_latency import RewardLatencyBench

    monkeypatch.setattr(RewardLatencyBench, "run", lambda self, on_run=None: _summary(3, {"fully-async": 1.39}))
    args = ["bench", "reward-latency", "--modes", "fully-async", "--steps", "3", "--repeats", "2"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "--steps 3 is too short" in warnings[0]


def test_an_infinite_mean_latency_with_an_explicit_scale_is_reported_as_unknown(tmp_path):
    # pareto:1:0.9 has no finite mean: with --latency-scale given the benchmark runs it, and what it reports after
    # each run (summary.json's mean_latency_s, the repeat's printed mean) is NaN (null in JSON), not a ValueError
    from rlrm.bench.reward_latency import RewardLatencyBench

    bench = RewardLatencyBench(
        profile="tiny-rule",
        modes=["sync"],
        latency="pareto:1:0.9",
        steps=1,
        repeats=1,
        seed=0,
        out=tmp_path / "b",
        latency_scale=0.01,
    )
    assert math.isnan(bench.summary()["mean_latency_s"])
    mean, ratio = bench.repeat_latency(0)
    assert math.isnan(mean) and ratio is None  # no baseline step yet
