"""The simulator knows a hosted judge's rate limits (`reward.limits`), and calibration reads them from a run.

The end-to-end test trains against the local stand-in for a rate-limited API (tests/fixtures/standin_openai_api.py)
and checks the simulator's prediction of that run's step time; benchmarks/simulate_rate_limit.py measures the same.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from rlrm.bench.simulate.run import run_simulation
from rlrm.bench.simulate.spec import load_spec
from rlrm.cli.main import app
from rlrm.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))

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


def test_calibrated_on_a_rate_limited_run_the_simulator_predicts_its_step_time(tmp_path, tiny_policy_path, monkeypatch):
    from standin_openai_api import StandinOpenAIAPI

    monkeypatch.setenv("STANDIN_KEY", "k")
    run, rpm = tmp_path / "run", 240.0
    with StandinOpenAIAPI("k", rpm=rpm) as api:
        sets = [
            f"reward.server.addresses=[{api.base_url}]",
            f"reward.server.model={api.model}",
            "reward.server.api_key_env=STANDIN_KEY",
            f"reward.limits.rpm={rpm}",
            "data.train_batch_size=4",
            "actor.mini_batch_size=4",
            "rollout.n=4",
            "trainer.total_steps=4",
            "trainer.val_every=0",
            "trainer.val_before_train=false",
            "trainer.save_every=0",
            "trainer.num_threads=1",
        ]
        result = CliRunner().invoke(
            app, ["train", "--profile", "tiny-genrm", "--out", str(run), *[a for s in sets for a in ("--set", s)]]
        )
        assert result.exit_code == 0, result.output
        assert not api.throttled  # paced at the limit: no 429
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    times = [r["perf/time_per_step"] for r in rows if r.get("step", 0) > 1 and "perf/time_per_step" in r]
    measured = sum(times) / len(times)
    assert measured >= 15 * 60 / rpm  # 16 calls a step, 0.25 s apart: the judge's budget sets the pace
    sim = tmp_path / "sim"
    result = CliRunner().invoke(
        app, ["bench", "simulate", "--from", str(run), "--out", str(sim), "--set", "modes=[sync]"]
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(sim / "results.csv")
    predicted = frame[frame["mode"] == "sync"]["step_time_mean"].iloc[-1]
    assert predicted == pytest.approx(measured, rel=0.10)
