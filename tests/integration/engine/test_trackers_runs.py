"""Trackers beside metrics.jsonl (rlrm/engine/metrics/trackers.py): read back from TensorBoard's event files, the
wandb offline run folder and the MLflow file store; a missing extra is one line before anything is written."""

from __future__ import annotations

import glob
import struct
from pathlib import Path

import pytest
from small_run import SMALL_RUN
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.config.loader import load_profile
from rlrm.engine.metrics import trackers
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.metrics.trackers import RunLog, check_trackers, run_id
from rlrm.engine.trainer import start_run, train
from rlrm.errors import ConfigError
from tests.unit.engine.metrics.test_trackers import ROWS, tensorboard_scalars

SECRET = "sk-audit-test-do-not-write-0123456789"


def wandb_records(run_folder: Path) -> list:
    """The records of a wandb offline run file (LevelDB log format: 32 KiB blocks, 7-byte chunk headers)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = glob.glob(str(run_folder / "*.wandb"))
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    pos, block, out, buf = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:  # padding up to the block's end
            pos += left
            continue
        buf = data[pos + 7 : pos + 7 + length] if kind in (1, 2) else buf + data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = pb.Record()
            record.ParseFromString(buf)
            out.append(record)
    return out


def profile_with(*overrides):
    return load_profile("tiny-rule", ["logging.trackers=[tensorboard, wandb, mlflow]", *overrides])


def test_every_tracker_gets_the_rows_and_the_profile(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", SECRET)  # offline: never used, never written
    monkeypatch.setenv("RLRM_API_KEY", SECRET)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    profile = profile_with("actor.lr=3e-4")
    log = RunLog(run_dir, profile, keep_through_step=0)
    for row in ROWS:
        log.log(row)
    log.close()
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [0, 1, 2]  # metrics.jsonl as always

    tb = tensorboard_scalars(run_dir / "tensorboard")
    assert tb["critic/score/mean"] == [(1, 0.5), (2, 0.75)] and tb["val/accuracy"] == [(0, 0.25)]
    assert tb["reward/failures"] == [(1, 0.0), (2, 2.0)]
    assert "note" not in tb and "flag" not in tb and "actor/grad_norm" not in tb  # text, bools, NaN left out

    (folder,) = glob.glob(str(run_dir / "wandb" / "offline-run-*"))
    records = wandb_records(Path(folder))

    def item(i):  # wandb stores a name with "/" as its parts
        return i.key or "/".join(i.nested_key)

    history = [
        {item(i): float(i.value_json) for i in r.history.item if not item(i).startswith("_")}
        | {"_step": r.history.step.num}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    assert history == [
        {"val/accuracy": 0.25, "_step": 0},
        {"critic/score/mean": 0.5, "response_length/mean": 13.0, "reward/failures": 0.0, "_step": 1},
        {"critic/score/mean": 0.75, "response_length/mean": 14.5, "reward/failures": 2.0, "_step": 2},
    ]
    (run_record,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    config = {i.key: i.value_json for i in run_record.config.update}
    assert run_record.run_id == run_id(run_dir) and '"lr":0.0003' in config["actor"].replace(" ", "")

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("rlrm").experiment_id])
    history = client.get_metric_history(run.info.run_id, "critic/score/mean")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.5), (2, 0.75)]
    assert run.data.params["actor.lr"] == "0.0003" and run.info.status == "FINISHED"
    artifact = Path(client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path)))
    assert "lr: 0.0003" in artifact.read_text()

    for path in run_dir.rglob("*"):  # no key anywhere in the run folder
        assert not path.is_file() or SECRET.encode() not in path.read_bytes(), path


def test_training_writes_the_same_rows_to_tensorboard(tmp_path, tiny_policy_path):
    profile = load_profile(
        "tiny-rule",
        [
            *SMALL_RUN,
            "data.val_size=4",
            "trainer.total_steps=2",
            "trainer.val_every=2",  # val/accuracy before step 1 and after step 2
            "logging.trackers=tensorboard",
            f"logging.tracker_dir={tmp_path / 'trackers'}",
        ],
    )
    run_dir = start_run(profile, tmp_path / "run")
    train(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    (own,) = (tmp_path / "trackers" / "tensorboard").iterdir()  # the run's own folder under a shared tracker_dir
    tb = tensorboard_scalars(own)
    for key in ("critic/score/mean", "val/accuracy", "response_length/mean", "perf/throughput"):
        expected = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        assert [(s, pytest.approx(v)) for s, v in tb[key]] == expected, key
    assert not (run_dir / "tensorboard").exists()  # logging.tracker_dir is where they go


def test_a_missing_extra_is_one_line_with_the_pip_command(tmp_path, monkeypatch):
    monkeypatch.setitem(trackers.EXTRAS, "wandb", ("rlrm_no_such_module_for_test", "wandb"))
    with pytest.raises(
        ConfigError, match=r"logging.trackers has wandb, which is not installed: pip install 'rlrm\[wandb\]'"
    ):
        check_trackers(profile_with().logging)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app, ["train", "--profile", "tiny-rule", "--set", "logging.trackers=wandb", "--out", str(out)]
    )
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code != 0 and len(lines) == 1 and "pip install 'rlrm[wandb]'" in lines[0], result.output
    assert not out.exists() and not (tmp_path / "runs").exists()  # refused before the run folder exists


def test_a_resumed_run_continues_its_tracker_runs(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    profile = load_profile("tiny-rule", ["logging.trackers=[tensorboard, mlflow]"])
    first = RunLog(run_dir, profile, keep_through_step=0)
    for row in ROWS:
        first.log(row)
    first.close()
    again = RunLog(run_dir, profile, keep_through_step=1)  # checkpoint at step 1: step 2 is trained again
    again.log({"step": 2, "critic/score/mean": 0.9})
    again.close()
    assert tensorboard_scalars(run_dir / "tensorboard")["critic/score/mean"] == [
        (1, 0.5),
        (2, pytest.approx(0.9)),
    ]  # purged, rewritten
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("rlrm").experiment_id])  # one MLflow run, not two
    history = client.get_metric_history(run.info.run_id, "critic/score/mean")
    # step 2 once, as metrics.jsonl has it: MLflow kept the dead session's 0.75 beside the resumed 0.9
    assert sorted((m.step, m.value) for m in history) == [(1, 0.5), (2, pytest.approx(0.9))]
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "val/accuracy")] == [(0, 0.25)]
    assert run.data.params["actor.lr"] == "0.0001" and run.data.tags["rlrm.run_id"] == run_id(run_dir)


def test_a_tracker_that_fails_to_close_costs_neither_the_checkpoint_nor_the_trace(tmp_path, monkeypatch):
    # MLflow's set_terminated or wandb's finish on a full disk: the close raised first, and the final checkpoint
    # (save_every=0: only at the end) and trace.json were never written
    import errno

    def failing_close(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(trackers.TensorBoardTracker, "close", failing_close)
    profile = load_profile("tiny-rule", [*SMALL_RUN, "trainer.total_steps=2", "logging.trackers=[tensorboard]"])
    run = start_run(profile, tmp_path / "run")
    with pytest.raises(OSError, match="No space left"):
        train(run)
    assert (run / "checkpoints" / "step_2").is_dir() and (run / "trace.json").is_file()


def test_a_tracker_that_fails_to_log_is_dropped_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    calls = []

    def failing_log(self, step, values):
        calls.append(step)
        raise RuntimeError("tracking server went away")

    monkeypatch.setattr(trackers.TensorBoardTracker, "log", failing_log)
    profile = load_profile("tiny-rule", [*SMALL_RUN, "trainer.total_steps=2", "logging.trackers=[tensorboard]"])
    run = start_run(profile, tmp_path / "run")
    assert train(run).last_step == 2
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl")]
    assert len(calls) == 1 and steps[-2:] == [1, 2]  # tried once, then left out; every row in metrics.jsonl
    assert "TensorBoardTracker failed (RuntimeError: tracking server went away)" in capsys.readouterr().err


def test_mlflow_takes_a_reported_key_mlflow_would_refuse(tmp_path):
    # a custom reward's own key, as reward/reported/<key>/mean: MLflow refuses '@' and the run crashed at step 1
    from mlflow.tracking import MlflowClient

    profile = load_profile("tiny-rule", ["logging.trackers=[mlflow]"])
    run = start_run(profile, tmp_path / "run")
    log = RunLog(run, profile, keep_through_step=-1)
    log.log({"step": 1, "reward/reported/pass@1/mean": 0.5, "reward/reported/pass#1/mean": 0.25})
    log.close()
    client = MlflowClient(tracking_uri=(run / "mlruns").resolve().as_uri())
    (found,) = client.search_runs([client.get_experiment_by_name("rlrm").experiment_id])
    assert found.data.metrics == {"reward/reported/pass_1/mean": 0.5, "reward/reported/pass_1/mean_1": 0.25}


def test_an_overwritten_run_is_a_new_tracker_run_under_a_shared_tracker_dir(tmp_path):
    from mlflow.tracking import MlflowClient

    store, run = tmp_path / "shared-trackers", tmp_path / "run"
    sets = ["logging.trackers=[mlflow,tensorboard]", f"logging.tracker_dir={store}"]
    for lr, score in (("1e-5", 0.1), ("3e-4", 0.9)):
        profile = load_profile("tiny-rule", [*sets, f"actor.lr={lr}"])
        start_run(profile, run, overwrite=True)
        log = RunLog(run, profile, keep_through_step=-1)  # what the trainer passes for a run from step 0
        log.log({"step": 1, "critic/score/mean": score})
        log.close()
    client = MlflowClient(tracking_uri=(store / "mlruns").resolve().as_uri())
    runs = client.search_runs([client.get_experiment_by_name("rlrm").experiment_id], order_by=["start_time DESC"])
    assert [r.data.params["actor.lr"] for r in runs] == ["0.0003", "1e-05"]
    assert [m.value for m in client.get_metric_history(runs[0].info.run_id, "critic/score/mean")] == [0.9]
    assert len(list((store / "tensorboard").iterdir())) == 2  # each run its own folder, not one mixed


def test_names_and_stores_wandb_or_mlflow_refuse_are_one_line(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    # wandb refuses "team/proj" (the entity/project habit) after the model loaded, in an 80-line traceback
    with pytest.raises(
        ConfigError, match=r"^logging.project 'team/proj' holds '/', which wandb refuses .*WANDB_ENTITY"
    ):
        check_trackers(load_profile("tiny-rule", ["logging.trackers=[wandb]", "logging.project=team/proj"]).logging)
    check_trackers(load_profile("tiny-rule", ["logging.trackers=[mlflow]", "logging.project=team/proj"]).logging)

    # a reward component named pass@1 was a param name MLflow refused as the tracker opened; an experiment
    # deleted in MLflow's UI took every later run down ("non-active experiment")
    store, reward = tmp_path / "shared", tmp_path / "my_reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n")
    sets = ["logging.trackers=[mlflow]", f"logging.tracker_dir={store}", "reward.kind=custom"]
    sets += [f"reward.custom.path={reward}", "reward.component_weights={pass@1: 1.0}"]
    profile = load_profile("tiny-rule", sets)
    first = tmp_path / "first"
    start_run(profile, first)
    RunLog(first, profile, keep_through_step=-1).close()
    client = MlflowClient(tracking_uri=(store / "mlruns").resolve().as_uri())
    client.delete_experiment(client.get_experiment_by_name("rlrm").experiment_id)
    second = tmp_path / "second"
    start_run(profile, second)
    RunLog(second, profile, keep_through_step=-1).close()
    runs = client.search_runs([client.get_experiment_by_name("rlrm").experiment_id])
    assert len(runs) == 2 and all(r.data.params["reward.component_weights.pass_1"] == "1.0" for r in runs)

    # a tracker that cannot open (wandb online without a key, a store that refuses) is one line naming it
    def refusing(*args, **kwargs):
        raise RuntimeError("No API key configured. Use `wandb login` to log in.\nmore lines")

    monkeypatch.setattr(trackers, "WandbTracker", refusing)
    wandb_profile = load_profile("tiny-rule", ["logging.trackers=[tensorboard, wandb]"])
    third = tmp_path / "third"
    start_run(wandb_profile, third)
    with pytest.raises(ConfigError) as caught:
        RunLog(third, wandb_profile, keep_through_step=-1)
    assert str(caught.value) == (
        "logging.trackers: wandb cannot open (RuntimeError: No API key configured. Use `wandb login` to log in.); "
        "fix that, or drop wandb from logging.trackers"
    )
