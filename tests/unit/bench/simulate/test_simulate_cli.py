"""`rlrm bench simulate` through the CLI: spec runs, sweeps, the validation table, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from rlrm.bench.simulate.run import MAX_REPEATS, run_simulation
from rlrm.bench.simulate.spec import MAX_REPLICAS, MODES, load_spec
from rlrm.cli.main import app
from rlrm.errors import ConfigError

REPO = Path(__file__).resolve().parents[4]
SMALL = [
    "workload.steps=6",
    "workload.prompts_per_step=4",
    "workload.samples_per_prompt=4",
    "workload.mini_batch_prompts=2",
    "workload.prompt_tokens=uniform:20:60",
    "workload.response_tokens=uniform:5:30",
    "workload.max_response_tokens=40",
    "rollout.batching=static",
    "rollout.iteration_s=0.01",
    "rollout.iteration_s_per_seq=0.001",
    "rollout.prefill_s_per_token=0.0002",
    "trainer.old_log_prob_s_per_token=0.0005",
    "trainer.minibatch_s=0.05",
    "trainer.minibatch_s_per_token=0.002",
    "reward.latency=uniform:0.1:1",
    "output.trace_detail_steps=6",
    "rollout.colocated_slowdown=2",  # as calibration takes rlrm's hf engine to be
]


def _sets(items):
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture(scope="module")
def simulated_bench(tmp_path_factory) -> Path:
    """A folder shaped like `rlrm bench reward-latency`'s, made by the simulator (known costs, every mode)."""
    out = tmp_path_factory.mktemp("simbench") / "bench"
    run_simulation(load_spec(overrides=SMALL), out, repeats=2)
    return out


def test_spec_run_writes_the_benchmark_layout(tmp_path):
    out = tmp_path / "sim"
    result = CliRunner().invoke(
        app,
        ["bench", "simulate", "--spec", str(REPO / "examples" / "cluster-gpu.yaml"), "--steps", "3", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out / "results.csv")
    assert list(frame["mode"]) == ["sync", *MODES]  # the zero-latency baseline first
    assert list(frame["latency"])[:2] == ["none", "uniform:1:40"]
    assert frame["speedup_vs_sync"].iloc[1] == pytest.approx(1.0)
    for run_dir in frame["run_dir"]:
        assert (out / run_dir / "metrics.jsonl").is_file() and (out / run_dir / "trace.json").is_file()
    assert (out / "results.parquet").is_file() and json.loads((out / "summary.json").read_text())["simulated"] is True
    assert "speedup vs sync" in result.output and "simulated in" in result.output


def test_sweep_writes_one_row_per_point_and_mode(tmp_path):
    out = tmp_path / "sweep"
    args = [
        "bench",
        "simulate",
        "--spec",
        str(REPO / "examples" / "cluster-gpu.yaml"),
        "--steps",
        "3",
        "--modes",
        "sync,fully-async",
        "--sweep",
        "reward.latency_scale=0,1,2",
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out / "results.csv")
    assert len(frame) == 3 * 3 and set(frame["sweep_key"]) == {"reward.latency_scale"}
    means = frame[frame["mode"] == "fully-async"].set_index("sweep_value")["mean_latency_s"]
    assert means.to_dict() == pytest.approx({0: 0.0, 1: 20.5, 2: 41.0})


def test_a_spec_or_sweep_point_without_latency_keeps_its_runs_apart_from_the_baseline():
    # the zero-latency baseline is told by its run folder, not by latency "none": a spec whose own latency is none
    # counts its sync run once per repeat (not pooled with the baseline), and a sweep point "none" keeps its modes
    spec = load_spec(overrides=[*SMALL, "modes=[sync,fully-async]", "reward.latency=none"])
    summary = run_simulation(spec, None, repeats=1, write=False).summary
    assert summary["modes"]["sync"]["repeats"] == 1 and summary["baseline"]["repeats"] == 1
    sweep = ("reward.latency", ["reward.latency=none", "reward.latency=fixed:1"])
    points = run_simulation(spec, None, sweep=sweep, repeats=1, write=False).summary["points"]
    assert set(points["none"]) == set(points["fixed:1"]) == {"sync", "fully-async"}
    assert points["none"]["sync"]["speedup_vs_sync"] == pytest.approx(1.0)


def test_validation_table_against_a_benchmark_folder(simulated_bench, tmp_path):
    out = tmp_path / "check"
    result = CliRunner().invoke(app, ["bench", "simulate", "--from", str(simulated_bench), "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "validation.csv")
    assert list(table["mode"]) == list(MODES)
    # the benchmark was simulated with the same model: calibrated on its zero-latency sync run, the prediction
    # differs only by the response lengths (a fitted normal instead of the uniform that made them)
    assert table["speedup_error"].abs().max() < 0.05
    assert table["idle_trainer_error"].abs().max() < 0.05
    # every run trained at the baseline's speed (one model made them all), so the prediction at the measured
    # speed is the prediction
    assert table["compute_speed"].between(0.95, 1.05).all()
    assert (table["at_speed_speedup"] - table["predicted_speedup"]).abs().max() < 0.05
    assert "predicted vs measured" in result.output and "rollout.iteration_s_per_seq" in result.output
    # the sync runs' traces record every sample's latency: each repeat is predicted on the latencies it drew
    assert "on the reward latencies the benchmark's 2 repeats drew" in result.output
    assert table["drawn_error"].notna().all()
    # two repeats: the measured speedup has a min-max interval, and the table says whether the prediction is in it
    assert (table["measured_lo"] <= table["measured_speedup"]).all()
    assert (table["measured_speedup"] <= table["measured_hi"]).all()
    inside = (table["measured_lo"] <= table["predicted_speedup"]) & (table["predicted_speedup"] <= table["measured_hi"])
    assert (table["inside"] == inside).all() and "inside" in result.output
    assert "older rlrm" not in result.output


def test_a_benchmark_of_an_older_rlrm_is_read_and_what_it_lacks_is_named(simulated_bench, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(simulated_bench, old)
    frame = pd.read_csv(old / "results.csv")
    frame.drop(columns=["speedup_lo", "speedup_hi", "of_limit", "bound_step_s"]).to_csv(
        old / "results.csv", index=False
    )
    result = CliRunner().invoke(app, ["bench", "simulate", "--from", str(old), "--out", str(tmp_path / "check")])
    assert result.exit_code == 0, result.output
    assert "older rlrm (results.csv has no speedup_lo, speedup_hi, of_limit)" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--spec", "{spec}", "--set", "rollout.replicaz=4"], "did you mean 'rollout.replicas'"),
        (["--spec", "{spec}", "--set", "rollout.replicas=0"], "rollout.replicas: Input should be greater than 0"),
        (["--spec", "{spec}", "--set", "trainer.ranks=-2"], "trainer.ranks"),
        (["--spec", "{spec}", "--sweep", "reward.latncy=fixed:1,fixed:2"], "did you mean 'reward.latency'"),
        (["--spec", "{spec}", "--sweep", "reward.latency_scale"], "KEY=V1,V2"),
        (["--spec", "{spec}", "--sweep", "rollout.replicas=8,0"], "--sweep point rollout.replicas=0: rollout.replicas"),
        (  # typer kept the last: the rate limit was dropped without a word
            ["--spec", "{spec}", "--sweep", "reward.limits.rpm=600,3000", "--sweep", "reward.cache_hit_rate=0,0.5"],
            "--sweep is given 2 times (reward.limits.rpm, reward.cache_hit_rate): one key is swept a run",
        ),
        (["--spec", "{bad_spec}"], "unknown spec key 'trainer.rank'; did you mean 'trainer.ranks'"),
        (["--spec", "{spec}", "--set", "reward.latency=uniform:5"], "uniform takes 2 numbers"),
        (["--from", "{nowhere}"], "does not exist"),
        ([], "give --from RUN_DIR"),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  rank: 4\n")
    paths = {
        "spec": str(REPO / "examples" / "cluster-gpu.yaml"),
        "bad_spec": str(bad),
        "nowhere": str(tmp_path / "nope"),
    }
    result = CliRunner().invoke(
        app, ["bench", "simulate", "--out", str(tmp_path / "o"), *(a.format(**paths) for a in args)]
    )
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_folder_without_trace_or_with_too_few_steps(simulated_bench, tmp_path):
    run = simulated_bench / "runs" / "sync-nolatency-r0"
    no_trace = tmp_path / "no-trace"
    no_trace.mkdir()
    for name in ("config.yaml", "metrics.jsonl"):
        (no_trace / name).write_text((run / name).read_text())
    result = CliRunner().invoke(app, ["bench", "simulate", "--from", str(no_trace), "--out", str(tmp_path / "a")])
    assert result.exit_code == 1 and "has no trace.json" in result.output and "at least 3 steps" in result.output
    short = tmp_path / "short"
    short.mkdir()
    (short / "config.yaml").write_text((run / "config.yaml").read_text())
    (short / "trace.json").write_text((run / "trace.json").read_text())
    (short / "metrics.jsonl").write_text("\n".join((run / "metrics.jsonl").read_text().splitlines()[:2]) + "\n")
    result = CliRunner().invoke(app, ["bench", "simulate", "--from", str(short), "--out", str(tmp_path / "b")])
    assert result.exit_code == 1 and "too short to fit: 2 step(s)" in result.output and "--steps 3" in result.output


def test_calibrate_on_a_run_and_simulate_a_bigger_fleet(simulated_bench, tmp_path):
    run = simulated_bench / "runs" / "sync-nolatency-r0"
    out = tmp_path / "bigger"
    args = ["bench", "simulate", "--from", str(run), "--set", "reward.latency=fixed:0.5", "--set", "rollout.replicas=2"]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    # calibrated on rlrm's hf engine, which shares the trainer's device: more engines need devices of their own
    assert result.exit_code == 1 and "set rollout.colocated_slowdown=1" in result.output
    result = CliRunner().invoke(app, [*args, "--set", "rollout.colocated_slowdown=1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "fitted on" in result.output and "rel. RMS error" in result.output
    assert pd.read_csv(out / "results.csv")["steps"].eq(6).all()


def test_dry_run_prints_a_spec_that_loads_back(simulated_bench, tmp_path):
    run = simulated_bench / "runs" / "sync-nolatency-r0"
    result = CliRunner().invoke(
        app, ["bench", "simulate", "--from", str(run), "--dry-run", "--out", str(tmp_path / "x")]
    )
    assert result.exit_code == 0, result.output
    saved = tmp_path / "fitted.yaml"
    saved.write_text(result.output)
    spec = load_spec(saved)
    assert spec.rollout.batching == "static" and spec.trainer.old_log_prob_s_per_token == pytest.approx(0.0005)
    assert not (tmp_path / "x").exists()  # nothing simulated, nothing written


@pytest.mark.parametrize("path", sorted((REPO / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_spec_loads_and_runs(path):
    spec = load_spec(path, ["workload.steps=2", "output.trace_detail_steps=1"])
    result = run_simulation(spec, None, write=False)
    assert len(result.rows) == 1 + len(spec.modes) and all(r["steps"] == 2 for r in result.rows)


def _bench_copy(simulated_bench: Path, dest: Path, results: str) -> Path:
    dest.mkdir()
    (dest / "runs").symlink_to(simulated_bench / "runs")
    (dest / "summary.json").write_text((simulated_bench / "summary.json").read_text())
    (dest / "results.csv").write_text(results)
    return dest


def test_a_truncated_or_non_finite_results_csv_is_refused_naming_file_and_row(simulated_bench, tmp_path):
    text = (simulated_bench / "results.csv").read_text()
    rows = len(text.splitlines()) - 1
    cut = _bench_copy(simulated_bench, tmp_path / "cut", text[:-3])  # the last row's number loses its last digits
    result = CliRunner().invoke(app, ["bench", "simulate", "--from", str(cut), "--out", str(tmp_path / "a")])
    assert result.exit_code == 1, result.output
    assert f"{cut / 'results.csv'} row {rows} is cut short" in result.output
    assert len(result.output.strip().splitlines()) == 1
    header, *body = text.splitlines()
    column = header.split(",").index("idle_trainer")
    fields = body[1].split(",")
    fields[column] = "inf"
    body[1] = ",".join(fields)
    inf = _bench_copy(simulated_bench, tmp_path / "inf", "\n".join([header, *body]) + "\n")
    result = CliRunner().invoke(app, ["bench", "simulate", "--from", str(inf), "--out", str(tmp_path / "b")])
    assert result.exit_code == 1, result.output
    assert f"{inf / 'results.csv'} row 2: idle_trainer is inf" in result.output
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize("value", [".inf", ".nan"])
def test_a_non_finite_cost_in_a_spec_is_refused(tmp_path, value):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"rollout:\n  iteration_s: {value}\n")
    result = CliRunner().invoke(app, ["bench", "simulate", "--spec", str(spec), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and "rollout.iteration_s" in result.output, result.output
    assert not (tmp_path / "o").exists()


def _gpu_run(tmp_path, *args):
    out = tmp_path / "o"
    spec = str(REPO / "examples" / "cluster-gpu.yaml")
    result = CliRunner().invoke(
        app,
        ["bench", "simulate", "--spec", spec, "--steps", "4", "--modes", "sync,fully-async", "--out", str(out), *args],
    )
    assert result.exit_code == 0, result.output
    return result.output, pd.read_csv(out / "results.csv")


def _table_line(output: str, *cells: str) -> str:
    return next(line for line in output.splitlines() if all(f" {c} " in line for c in cells))


def test_reward_failures_are_a_column_and_a_warning_and_the_latency_shows_its_scale(tmp_path):
    # cluster-gpu's judge times out at 300 s: uniform 1-40 s x16 reaches 640 s, so some calls fail every retry
    output, frame = _gpu_run(tmp_path, "--sweep", "reward.latency_scale=1,16")
    at16 = frame[(frame["sweep_value"] == 16) & (frame["latency"] != "none")]
    failures, samples = int(at16["reward_failures"].iloc[0]), int(at16["samples"].iloc[0])
    assert samples == 4 * 1024 * 5 and 0 < failures < samples  # measured: 1,793 of 20,480
    assert at16["latency_scale"].tolist() == [16.0, 16.0]
    assert "reward failures" in output
    sync16 = _table_line(output, "16", "sync", "uniform:1:40 x16")
    assert f"{failures:,} ({failures / samples:.1%})" in sync16
    # the scale-1 point shows the spec as written, and no failure
    assert _table_line(output, "1", "sync", "uniform:1:40").rstrip("│ ").endswith(" 0")
    warnings = [line for line in output.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "rewards failed in 2 of 6 runs" in warnings[0]
    assert f"{failures:,} of {samples:,} samples" in warnings[0] and "reward.timeout_s" in warnings[0]


def test_a_mode_whose_rewards_all_failed_shows_no_speedup(tmp_path):
    # a failure budget of 1 never stops the run (the default stops it: the test below)
    output, frame = _gpu_run(tmp_path, "--set", "reward.latency_scale=1e300", "--set", "reward.max_failure_rate=1")
    latent = frame[frame["latency"] != "none"]
    assert (latent["reward_failures"] == latent["samples"]).all()
    row = _table_line(output, "fully-async")
    assert "all failed" in row and "x" not in row.split("│")[4]  # no speedup figure in its column
    assert "every reward failed in 2 runs (sync, fully-async)" in output


@pytest.mark.parametrize("on_failure", ["default", "drop-group", "fail"])
def test_runs_whose_rewards_all_fail_stop_at_step_1_as_training_would(tmp_path, on_failure):
    # every attempt fails: the reward failure budget (or on_failure=fail) stops each run before its first update;
    # before, drop-group divided by zero and fail had "no completed step"
    sets = ["reward.fail_rate=1", "reward.max_retries=0", f"reward.on_failure={on_failure}"]
    output, frame = _gpu_run(tmp_path, *[a for s in sets for a in ("--set", s)])
    assert frame["steps"].tolist() == [0, 0, 0] and frame["speedup_vs_sync"].isna().all()
    row = _table_line(output, "fully-async")
    assert row.split("│")[4].strip() == "stopped" and row.split("│")[-2].strip() == "-"
    why = (
        "a reward failed after 0 retries and reward.on_failure is fail"
        if on_failure == "fail"
        else "5120 of 5120 reward samples failed (100%), over reward.max_failure_rate=0.5"
    )
    assert f"note: runs/fully-async-r0: step 1: {why}" in output


def test_drop_group_counts_the_failures_of_the_groups_it_dropped(tmp_path):
    sets = ["reward.fail_rate=0.3", "reward.max_retries=0", "reward.on_failure=drop-group", "reward.max_failure_rate=1"]
    output, frame = _gpu_run(tmp_path, *[a for s in sets for a in ("--set", s)])
    latent = frame[frame["latency"] != "none"]
    scored = latent["reward_samples"]
    assert (scored == 4 * 1024 * 5).all() and (latent["samples"] < scored).all()  # trained: the groups kept
    share = latent["reward_failures"] / scored
    assert share.between(0.27, 0.33).all(), share.tolist()  # 0.3 of the scored samples, not 0 of the trained
    assert "rewards failed in 3 of 3 runs" in output


def test_a_mode_named_twice_is_refused(tmp_path):
    spec = str(REPO / "examples" / "cluster-gpu.yaml")
    args = ["bench", "simulate", "--spec", spec, "--modes", "sync,stream,sync", "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1 and result.output.strip().splitlines() == [
        "error: --modes names sync twice; name each mode once (--repeats runs it again)"
    ]
    with pytest.raises(ConfigError, match="modes: names stream twice"):
        load_spec(overrides=["modes=[stream,stream]"])
    assert not (tmp_path / "o").exists()


def test_a_fleet_beyond_the_limit_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"rollout.replicas = 1,000,000,000: the simulator takes at most 100,000"):
        load_spec(REPO / "examples" / "cluster-gpu.yaml", ["rollout.replicas=1000000000"])
    assert load_spec(overrides=[f"rollout.replicas={MAX_REPLICAS}"]).rollout.replicas == MAX_REPLICAS


def test_repeats_beyond_the_limit_are_refused_before_anything_runs(tmp_path):
    spec = load_spec(overrides=[*SMALL, "workload.steps=1", "modes=[sync]"])
    with pytest.raises(ConfigError, match=f"--repeats {MAX_REPEATS + 1}: at most {MAX_REPEATS} simulated repeats"):
        run_simulation(spec, tmp_path / "o", repeats=MAX_REPEATS + 1)
    assert not (tmp_path / "o").exists()
    result = CliRunner().invoke(
        app,
        ["bench", "simulate", "--spec", str(REPO / "examples" / "cluster-gpu.yaml"), "--repeats", "100000000"]
        + ["--out", str(tmp_path / "o")],
    )
    assert result.exit_code == 1 and result.output.strip().splitlines() == [
        "error: --repeats 100,000,000: at most 100 simulated repeats (each simulates every mode again; 5 give a "
        "bootstrap 95% interval)"
    ]


def test_a_bad_set_value_is_named_as_given_not_blamed_on_the_spec_file():
    from rlrm.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^--set rollout\.replicas: Input should be greater than 0 \(got 0\)"):
        load_spec(REPO / "examples" / "cluster-gpu.yaml", ["rollout.replicas=0"])
