"""The simulator knows a hosted judge's rate limits (`reward.limits`), and calibration reads them from a run.

The end-to-end test trains against the local stand-in for a rate-limited API (tests/fixtures/standin_openai_api.py)
and checks the simulator's prediction of that run's step time; benchmarks/simulate_rate_limit.py measures the same.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from small_run import SMALL_RUN, as_set_args
from typer.testing import CliRunner

from rlrm.cli.main import app


def test_calibrated_on_a_rate_limited_run_the_simulator_predicts_its_step_time(tmp_path, tiny_policy_path, monkeypatch):
    from standin_openai_api import StandinOpenAIAPI

    monkeypatch.setenv("STANDIN_KEY", "k")
    run, rpm = tmp_path / "run", 480.0  # 8 calls a second: the judge still sets the pace of a ~0.2 s compute step
    with StandinOpenAIAPI("k", rpm=rpm) as api:
        sets = [
            f"reward.server.addresses=[{api.base_url}]",
            f"reward.server.model={api.model}",
            "reward.server.api_key_env=STANDIN_KEY",
            f"reward.limits.rpm={rpm}",
            "reward.cache.enabled=false",  # 16 judge calls a step: a cache hit would skip one
            *SMALL_RUN,
            "rollout.n=4",  # 16 judge calls a step
            "trainer.total_steps=3",  # step 1 is warm-up; steps 2 and 3 are measured and fitted (calibration's least)
            "trainer.val_before_train=false",
        ]
        result = CliRunner().invoke(app, ["train", "--profile", "tiny-genrm", "--out", str(run), *as_set_args(*sets)])
        assert result.exit_code == 0, result.output
        assert not api.throttled  # paced at the limit: no 429
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    times = [r["perf/time_per_step"] for r in rows if r.get("step", 0) > 1 and "perf/time_per_step" in r]
    measured = sum(times) / len(times)
    assert measured >= 15 * 60 / rpm  # 16 calls a step, 0.125 s apart: the judge's budget sets the pace
    sim = tmp_path / "sim"
    result = CliRunner().invoke(
        app, ["bench", "simulate", "--from", str(run), "--out", str(sim), "--set", "modes=[sync]"]
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(sim / "results.csv")
    predicted = frame[frame["mode"] == "sync"]["step_time_mean"].iloc[-1]
    assert predicted == pytest.approx(measured, rel=0.10)
