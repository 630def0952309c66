"""`rlrm bench reward-latency` settings checked before anything runs: the loop's concurrency and one-line bad inputs."""

from __future__ import annotations

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
