"""The simulator's reward rate limits (reward.limits): pacing, concurrency caps and sweeps, in-process (the run against a rate-limited stand-in is in tests/integration/bench/test_simulate_limits.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from rlrm.bench.simulate.run import run_simulation
from rlrm.bench.simulate.spec import load_spec
from rlrm.cli.main import app
from rlrm.errors import ConfigError

# G = 50 decode iterations of 0.01 s = 0.5 s; T = 32 samples x 60 tokens x 1 ms = 1.92 s; 32 reward calls a step
BASE = [
    "workload.steps=20",
    "workload.prompts_per_step=8",
    "workload.samples_per_prompt=4",
    "workload.mini_batch_prompts=8",
    "workload.response_tokens=fixed:50",
    "workload.prompt_tokens=fixed:10",
    "workload.max_response_tokens=64",
    "reward.latency=fixed:0.5",
    "rollout.iteration_s=0.01",
    "trainer.minibatch_s_per_token=0.001",
]


G, T, CALLS, LATENCY = 0.5, 1.92, 32, 0.5


def _steps(*sets: str) -> dict[str, float]:
    rows = run_simulation(load_spec(overrides=[*BASE, *sets]), None, repeats=1, write=False).rows
    return {r["mode"]: r["step_time_mean"] for r in rows if r["latency"] != "none"}


@pytest.mark.parametrize(("limit", "pace_s"), [("rpm=600", 0.1), ("rpm=60", 1.0), ("tpm=60000", 0.5)])
def test_a_rate_limit_paces_the_reward_calls(limit, pace_s):
    steps = _steps(f"reward.limits.{limit}", "reward.limits.tokens_per_call=500")
    # sync: the calls leave pace_s apart once the batch is generated; the last one then takes its latency
    assert steps["sync"] == pytest.approx(G + (CALLS - 1) * pace_s + LATENCY + T, rel=1e-6)
    # fully-async: the judge's budget is the bottleneck, one batch of calls per step
    assert steps["fully-async"] == pytest.approx(max(CALLS * pace_s, T), rel=0.02)


def test_no_limit_and_a_loose_one_change_nothing():
    free = _steps()
    loose = _steps("reward.limits.rpm=1000000")  # 32 calls 60 us apart: 2 ms a step
    assert all(loose[m] == pytest.approx(free[m], abs=0.002) for m in free)
    assert free["sync"] == pytest.approx(G + LATENCY + T)


def test_max_concurrent_caps_calls_over_every_worker():
    # 4 workers x 64 slots would run all 32 at once; a cap of 8 runs them in 4 waves of the 0.5 s latency
    steps = _steps("reward.limits.max_concurrent=8", "reward.workers=4")
    assert steps["sync"] == pytest.approx(G + 4 * LATENCY + T, rel=1e-6)


@pytest.mark.parametrize("bad", ["reward.limits.rpm=0", "reward.limits.rpm=-5", "reward.limits.tpm=nan"])
def test_bad_limits_are_refused(bad):
    with pytest.raises(ConfigError, match="reward.limits"):
        load_spec(overrides=[*BASE, bad])


def test_a_sweep_over_the_rate_limit_answers_what_limit_a_step_time_needs(tmp_path):
    from rlrm.bench.simulate.spec import dump_spec

    spec = tmp_path / "judge-api.yaml"
    spec.write_text(dump_spec(load_spec(overrides=BASE)))
    args = ["bench", "simulate", "--spec", str(spec), "--out", str(tmp_path / "sweep")]
    result = CliRunner().invoke(app, [*args, "--sweep", "reward.limits.rpm=60,600,6000"])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(tmp_path / "sweep" / "results.csv")
    fa = frame[(frame["mode"] == "fully-async") & (frame["latency"] != "none")].set_index("sweep_value")
    steps = {str(k): v for k, v in fa["step_time_mean"].to_dict().items()}
    assert steps["60"] > steps["600"] > steps["6000"]  # a looser limit, a shorter step, down to the compute bound
    assert steps["6000"] == pytest.approx(T, rel=0.02)
