"""Calibration recovers the costs a synthetic trace was made with, and says what it cannot fit."""

from __future__ import annotations

import json

import pytest

from rlrm.bench.simulate.calibrate import _workload, calibrate
from rlrm.bench.simulate.fit import clipped_mean, fit_clipped_normal, fit_cost
from rlrm.bench.simulate.observe import RunProfile, Steps
from rlrm.bench.simulate.run import run_simulation
from rlrm.bench.simulate.spec import load_spec
from rlrm.errors import RunFolderError

TRUE = {
    "rollout.batch_overhead_s": 0.05,
    "rollout.iteration_s": 0.01,
    "rollout.iteration_s_per_seq": 0.002,
    "rollout.prefill_s_per_token": 0.0005,
    "rollout.submit_s": 0.02,
    "rollout.return_s": 0.003,
    "rollout.first_batch_extra_s": 0.4,
    "reward.base_s": 0.01,
    "trainer.old_log_prob_s": 0.03,
    "trainer.old_log_prob_s_per_token": 0.0002,
    "trainer.minibatch_s": 0.05,
    "trainer.minibatch_s_per_token": 0.001,
    "trainer.weight_sync_s": 0.006,
    "trainer.step_overhead_s": 0.002,
    "trainer.first_step_extra_s": 0.7,
}
WORKLOAD = [
    "modes=[sync]",
    "workload.steps=16",
    "workload.prompts_per_step=4",
    "workload.samples_per_prompt=2",
    "workload.mini_batch_prompts=4",
    "workload.prompt_tokens=uniform:10:50",
    "workload.response_tokens=uniform:5:60",
    "workload.max_response_tokens=100",
    "rollout.batching=static",
    "rollout.batch_wait_s=0.002",
    "output.trace_detail_steps=16",
]


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    """A simulated sync run (its trace.json, metrics.jsonl and config.yaml) with known costs."""
    out = tmp_path_factory.mktemp("synthetic")
    spec = load_spec(overrides=[*WORKLOAD, *(f"{k}={v}" for k, v in TRUE.items())])
    run_simulation(spec, out)
    return out / "runs" / "sync-nolatency-r0"


def test_calibration_recovers_known_costs(synthetic_run):
    cal = calibrate([synthetic_run])
    fitted = {key: value for key, value, _ in cal.params}
    for key, value in TRUE.items():
        assert fitted[key] == pytest.approx(value, rel=0.02, abs=1e-6), key
    assert cal.steps == 16
    notes = {key: note for key, _, note in cal.params}
    assert "rel. RMS error 0.0%" in notes["rollout.iteration_s_per_seq"]  # the decode model is exact here


def test_calibrated_spec_replays_the_run(synthetic_run):
    # simulating the fitted spec gives back the measured step times (same seed, same draws)
    cal = calibrate([synthetic_run])
    spec = load_spec(
        overrides=[
            "modes=[sync]",
            "output.trace_detail_steps=0",
            "workload.response_tokens=uniform:5:60",
            "workload.prompt_tokens=uniform:10:50",
        ],
        base=cal.spec_values,
    )
    replay = run_simulation(spec, None, write=False)
    measured = [
        json.loads(line)["perf/time_per_step"] for line in (synthetic_run / "metrics.jsonl").read_text().splitlines()
    ]
    simulated = replay.rows[0]["steps"] / replay.rows[0]["steps_per_hour"] * 3600
    assert simulated == pytest.approx(sum(measured), rel=0.01)


@pytest.mark.parametrize(
    ("actor", "recomputed", "expected"),
    [
        ({"recompute_old_log_prob": "never"}, False, False),
        ({"recompute_old_log_prob": "always"}, False, True),
        ({"recompute_old_log_prob": "auto"}, False, False),  # one epoch, an engine computing as the actor
        ({"recompute_old_log_prob": "auto", "ppo_epochs": 2}, False, True),
        ({"recompute_old_log_prob": "auto"}, True, True),  # the steps logged rollout/log_prob_diff_*
        ({"recompute_old_log_prob": False}, False, False),  # a simulated run's config holds the spec's bool
    ],
)
def test_the_recompute_setting_is_read_by_the_trainers_rule(actor, recomputed, expected):
    values = {}
    _workload(RunProfile({"actor": actor}), Steps(recomputed=recomputed), lambda k, v, note: values.__setitem__(k, v))
    assert values["workload.recompute_old_log_prob"] is expected  # bool("never") was True


def test_a_run_that_recomputed_nothing_is_fitted_as_collation(tmp_path):
    # the trainer times collation under old_log_prob in every mode: a run that never recomputed measured collation
    # alone, which comes back as collate_* (charged in every mode) beside a spec that recomputes nothing
    sets = [f"{k}={v}" for k, v in TRUE.items() if ".old_log_prob" not in k]
    sets += ["workload.recompute_old_log_prob=false", "trainer.collate_s=0.03", "trainer.collate_s_per_token=0.0002"]
    run_simulation(load_spec(overrides=[*WORKLOAD, *sets]), tmp_path)
    cal = calibrate([tmp_path / "runs" / "sync-nolatency-r0"])
    fitted = {key: value for key, value, _ in cal.params}
    assert fitted["trainer.collate_s"] == pytest.approx(0.03, rel=0.02)
    assert fitted["trainer.collate_s_per_token"] == pytest.approx(0.0002, rel=0.02)
    assert "trainer.old_log_prob_s" not in fitted and cal.spec_values["workload"]["recompute_old_log_prob"] is False


def test_what_does_not_vary_folds_into_the_fixed_part():
    # every decode batch has the same longest response: its per-iteration cost cannot be told from a constant
    fit = fit_cost([1.0, 1.2, 1.4], {"resp": [10, 20, 30], "longest": [20, 20, 20]}, proportional_to="resp")
    assert fit.coef["resp"] == pytest.approx(0.02) and fit.intercept == pytest.approx(0.8)
    assert fit.coef["longest"] == 0 and fit.dropped == ["longest"]
    # nothing varies: proportional to the named regressor (a per-token cost scales, a constant would not)
    flat = fit_cost([2.0, 2.0], {"token": [100, 100]}, proportional_to="token")
    assert flat.coef["token"] == pytest.approx(0.02) and flat.intercept == 0 and flat.proportional == "token"


def test_clipped_normal_matches_mean_and_clip_ratio():
    mu, sigma = fit_clipped_normal(mean=13.2, clip_ratio=0.05, upper=20)
    assert clipped_mean(mu, sigma, 20) == pytest.approx(13.2, rel=1e-4)
    z = (20 - mu) / sigma  # P(X >= 20) = 0.05 -> z = 1.645
    assert z == pytest.approx(1.6449, abs=1e-3)


def test_missing_or_short_traces_say_what_is_needed(synthetic_run, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.yaml").write_text("{}")
    (empty / "metrics.jsonl").write_text("")
    with pytest.raises(RunFolderError, match="no trace.json.*at least 3 steps"):
        calibrate([empty])
    short = tmp_path / "short"
    short.mkdir()
    for name in ("config.yaml", "trace.json"):
        (short / name).write_text((synthetic_run / name).read_text())
    lines = (synthetic_run / "metrics.jsonl").read_text().splitlines()[:2]
    (short / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RunFolderError, match="too short to fit: 2 step.*at least 3 steps"):
        calibrate([short])


def test_colocated_slowdown_is_fitted_from_the_cores_each_phase_keeps_busy(synthetic_run, tmp_path):
    import shutil

    assert {k: v for k, v, _ in calibrate([synthetic_run]).params}[
        "rollout.colocated_slowdown"
    ] == 2.0  # no cpu_s: assumed
    run = tmp_path / "run"
    shutil.copytree(synthetic_run, run)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for row in rows:  # generation kept 1.4 cores busy, the update 1.7, on 2 cores
        row.update(
            {
                "timing_s/gen": 1.0,
                "cpu_s/gen": 1.4,
                "cpu_s/update_actor": 1.7 * row.get("timing_s/update_actor", 0.0),
                "perf/cpu_cores": 2,
            }
        )
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fitted = {k: (v, note) for k, v, note in calibrate([run]).params}
    value, note = fitted["rollout.colocated_slowdown"]
    assert value == pytest.approx((1.4 + 1.7) / 2, abs=1e-3) and "1.40" in note and "1.70" in note
    for row in rows:  # on 8 cores the two fit side by side: no slowdown
        row["perf/cpu_cores"] = 8
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert {k: v for k, v, _ in calibrate([run]).params}["rollout.colocated_slowdown"] == 1.0


def test_the_reward_cache_hit_rate_is_fitted_and_its_hits_leave_the_reward_cost_alone(tmp_path):
    # a run whose reward cache answered ~70% of the samples: the hit rate comes back, and the hits (no call, 0 s)
    # are not averaged into the reward function's own cost
    spec = load_spec(
        overrides=[*WORKLOAD, *(f"{k}={v}" for k, v in TRUE.items()), "modes=[stream]", "reward.cache_hit_rate=0.7"]
    )
    run_simulation(spec, tmp_path)
    run = tmp_path / "runs" / "stream-r0"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["step"] >= 2]  # calibration leaves out step 1 (warm-up)
    hits, looked = sum(r["reward/cache_hits"] for r in rows), sum(r["batch/num_samples"] for r in rows)
    fitted = {key: value for key, value, _ in calibrate([run]).params}
    assert 0.55 < hits / looked < 0.85
    assert fitted["reward.cache_hit_rate"] == pytest.approx(hits / looked)
    assert fitted["reward.base_s"] == pytest.approx(TRUE["reward.base_s"], rel=0.02)


@pytest.mark.parametrize("reward", [{"attempt_timeout_s": 9.0}, {"timeout_s": 9.0}])
def test_the_attempt_deadline_is_read_from_a_run_under_its_new_name_or_the_old(synthetic_run, tmp_path, reward):
    import shutil

    import yaml

    from rlrm.bench.simulate.observe import profile_of_spec

    run = tmp_path / "run"
    shutil.copytree(synthetic_run, run)
    raw = yaml.safe_load((run / "config.yaml").read_text())
    profile = profile_of_spec(raw["spec"], "sync")  # the run as a profile, as a real run's config.yaml holds it
    assert profile["reward"].pop("attempt_timeout_s") == 30.0  # the simulated spec's deadline, read as the new key
    profile["reward"].update(reward)  # a run from after the rename, or from before it
    (run / "config.yaml").write_text(yaml.safe_dump(profile))
    assert calibrate([run]).spec_values["reward"]["timeout_s"] == 9.0  # the simulator's attempt deadline


def test_a_resumed_runs_rows_are_read_on_the_traces_clock(tmp_path):
    # session 2 (after step 2) is 3 s later in the trace, and its perf/wall_s goes on from 2 s: its rows were read
    # against the trace's spans unshifted, so calibration looked for step 3's requests in the wrong window
    import json

    from rlrm.bench.simulate.observe import read_run

    (tmp_path / "config.yaml").write_text("trainer:\n  mode: sync\n")
    rows = [{"step": k, "perf/wall_s": float(k), "perf/time_per_step": 1.0} for k in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = {"name": "session 2", "resumed_after_step": 2, "shift_s": 3.0, "wall_offset_s": 2.0}
    events = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": args}]
    events.append({"name": "update", "cat": "trainer", "ph": "X", "pid": 1, "tid": 0, "ts": 3e6, "dur": 1e6})
    (tmp_path / "trace.json").write_text(json.dumps({"traceEvents": events}))
    _, read, spans = read_run(tmp_path)
    assert [r["perf/wall_s"] for r in read] == [1.0, 2.0, 4.0]  # step 3 ends at 4 s on the trace, as its update
    assert [e["name"] for e in spans] == ["update"]
