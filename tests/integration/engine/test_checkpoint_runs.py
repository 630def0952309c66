"""Checkpoints: nothing in one is unpickled, RNG states round-trip as tensors, non-finite weights
are never saved nor resumed from."""

from __future__ import annotations

import shutil

import pytest
import torch
from small_run import SMALL_RUN
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.config.loader import load_profile
from rlrm.engine.checkpoint import list_checkpoints
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train
from rlrm.errors import ConfigError, TrainingError
from rlrm.report.folders import load_folder
from rlrm.report.timeline import read_trace, timeline_panel

SMALL = [*SMALL_RUN, "trainer.save_every=1", "trainer.keep_checkpoints=10"]


class _Payload:
    """Unpickling this creates `marker`: what a malicious state.pt would do (with os.system instead)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _fake_checkpoint(tmp_path, tiny_policy_path):
    """A run folder whose step_1 checkpoint holds the tiny policy (state.pt left to the test)."""
    run_dir = start_run(load_profile("tiny-rule", SMALL + ["trainer.total_steps=2"]), tmp_path / "run")
    ckpt = run_dir / "checkpoints" / "step_1"
    shutil.copytree(tiny_policy_path, ckpt / "model")
    return run_dir, ckpt


def _resume(run_dir, *more: str):
    result = CliRunner().invoke(app, ["train", "--resume", str(run_dir), "--console", "none", *more])
    lines = [line for line in result.output.splitlines() if line.strip()]
    return result.exit_code, lines


def test_a_resumed_run_keeps_the_trace_of_its_earlier_steps_and_reports_them(tmp_path, tiny_policy_path, notes):
    run_dir = start_run(load_profile("tiny-rule", SMALL + ["trainer.total_steps=2"]), tmp_path / "run")
    assert train(run_dir).last_step == 2
    before = read_trace(run_dir / "trace.json")
    assert _updates(before) == [0, 0]
    code, lines = _resume(run_dir, "--steps", "3")  # rlrm train --resume DIR --steps 3
    assert code == 0, lines
    after = read_trace(run_dir / "trace.json")
    assert after[: len(before)] == before  # session 1's events, as they were
    assert _updates(after) == [0, 0, 1]  # step 3: session 2's own process, after session 1 in time
    old_end = max(e["ts"] + e["dur"] for e in before if e["ph"] == "X")
    assert min(e["ts"] for e in after[len(before) :] if e["ph"] == "X") > old_end
    assert "session 2 (resumed after step 2)" in {e["args"]["name"] for e in after if e["name"] == "process_name"}
    # perf/wall_s goes on from step 2's (it used to restart at 0: `rlrm report --x time` folded back)
    walls = [r["perf/wall_s"] for r in read_metrics(run_dir / "metrics.jsonl") if "perf/wall_s" in r]
    assert len(walls) == 3 and walls[0] < walls[1] < walls[2]
    # The timeline finds step 3 among session 2's events, and its span within the step's window.
    panel = timeline_panel(load_folder(run_dir, notes), (3, 3), notes)
    assert (panel.events["name"] == "update_actor").sum() == 1 and not notes
    update = panel.events[panel.events["name"] == "update_actor"].iloc[0]
    assert update["end_s"] > update["start_s"]  # not clipped to nothing: the step's window holds its update
    result = CliRunner().invoke(app, ["report", str(run_dir), "--out", str(tmp_path / "report")])
    assert result.exit_code == 0 and (tmp_path / "report" / "timeline.png").is_file(), result.output
    assert "unreadable" not in result.output and "no spans" not in result.output
    whole = (run_dir / "trace.json").read_bytes()
    code, lines = _resume(run_dir)  # a finished run: nothing to train, the trace stays as it is
    assert code == 0, lines
    assert (run_dir / "trace.json").read_bytes() == whole


def _updates(events: list[dict]) -> list[int]:
    """The trace process (session) of each step's update_actor span, in time order."""
    updates = sorted((e["ts"], e["pid"]) for e in events if e.get("ph") == "X" and e["name"] == "update_actor")
    return [pid for _, pid in updates]


def test_a_state_pt_with_a_pickle_payload_is_refused_and_never_runs(tmp_path, tiny_policy_path):
    run_dir, ckpt = _fake_checkpoint(tmp_path, tiny_policy_path)
    marker = tmp_path / "payload-ran"
    torch.save({"actor": {}, "loader": {}, "step": 1, "rng": _Payload(marker)}, ckpt / "state.pt")
    # The payload is live: an unrestricted load (what resume did before) runs it.
    probe = tmp_path / "probe.pt"
    torch.save({"rng": _Payload(tmp_path / "probe-ran")}, probe)
    torch.load(probe, weights_only=False)
    assert (tmp_path / "probe-ran").exists()

    code, lines = _resume(run_dir)
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith("error: ") and "state.pt" in lines[0] and "weights_only=True" in lines[0]
    assert not marker.exists()
    assert list_checkpoints(run_dir) == [ckpt]  # nothing removed: the user decides


def test_pickled_weights_in_the_model_folder_are_refused_before_loading(tmp_path, tiny_policy_path):
    run_dir, ckpt = _fake_checkpoint(tmp_path, tiny_policy_path)
    marker = tmp_path / "payload-ran"
    torch.save({"w": _Payload(marker)}, ckpt / "model" / "pytorch_model.bin")
    code, lines = _resume(run_dir)
    assert code == 1 and len(lines) == 1, lines
    assert "pickled weights (pytorch_model.bin)" in lines[0] and "never unpickles" in lines[0]
    assert not marker.exists()


def test_a_checkpoint_with_non_finite_weights_is_not_resumed(tmp_path, tiny_policy_path):
    from safetensors.torch import load_file, save_file

    run_dir, ckpt = _fake_checkpoint(tmp_path, tiny_policy_path)
    weights = load_file(ckpt / "model" / "model.safetensors")
    name = sorted(weights)[0]
    weights[name][0] = float("nan")
    save_file(weights, ckpt / "model" / "model.safetensors", metadata={"format": "pt"})
    code, lines = _resume(run_dir)
    assert code == 1 and len(lines) == 1, lines
    assert f"checkpoint step_1 has non-finite weights ({name} holds NaN or inf)" in lines[0]


def test_a_run_whose_weights_blow_up_keeps_its_last_finite_checkpoint(tmp_path, tiny_policy_path, monkeypatch):
    from rlrm.engine.actor.actor import Actor

    real_end_update = Actor.end_update

    def end_update(self, history):
        metrics = real_end_update(self, history)
        if self.scheduler.last_epoch >= 2:  # the second update overflows (as a too-high lr in bf16 would)
            with torch.no_grad():
                next(iter(self.model.parameters())).fill_(float("inf"))
        return metrics

    monkeypatch.setattr(Actor, "end_update", end_update)
    run_dir = start_run(load_profile("tiny-rule", SMALL + ["trainer.total_steps=6"]), tmp_path / "run")
    with pytest.raises(TrainingError, match="non-finite losses in a row"):
        train(run_dir)
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_1"]


def test_an_update_that_stops_partway_is_never_saved_as_the_step_before(tmp_path, tiny_policy_path, monkeypatch, capfd):
    """Step 2's first mini-batch has stepped the optimizer when its second fails (non-finite here; out of GPU
    memory or a lost rank alike): the actor is step 1 plus part of step 2, which the run's closing save once
    wrote as step_1, so a resume applied part of step 2 twice."""
    from rlrm.engine.actor.actor import Actor

    real_clip, clips = Actor.clip_grad_norm, []

    def clip(self):
        clips.append(real_clip(self))
        return float("inf") if len(clips) == 4 else clips[-1]  # step 2, mini-batch 2 (2 a step)

    monkeypatch.setattr(Actor, "clip_grad_norm", clip)
    more = ["actor.mini_batch_size=2", "actor.max_nonfinite_steps=1", "trainer.total_steps=3", "trainer.save_every=0"]
    run_dir = start_run(load_profile("tiny-rule", [*SMALL_RUN, *more]), tmp_path / "run")
    with pytest.raises(TrainingError, match="non-finite"):
        train(run_dir)
    assert len(clips) == 4 and list_checkpoints(run_dir) == []  # step 1's closing save would hold part of step 2
    assert "step 2's update stopped partway, so the actor is no longer step 1's" in capfd.readouterr().err


@pytest.mark.parametrize("keep", [0.5, 0.0001])  # cut inside the tensors, and inside the header
def test_a_truncated_model_safetensors_is_one_line_naming_the_checkpoint(tmp_path, tiny_policy_path, keep):
    run_dir, ckpt = _fake_checkpoint(tmp_path, tiny_policy_path)
    weights = ckpt / "model" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: max(4, int(len(data) * keep))])  # a copy cut short, a full disk
    code, lines = _resume(run_dir)
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith("error: checkpoint step_1: model.safetensors is damaged") and "delete" in lines[0]


def test_a_model_edited_in_config_yaml_before_resume_is_refused_naming_the_key(tmp_path, tiny_policy_path):
    import yaml

    run_dir = start_run(load_profile("tiny-rule", SMALL + ["trainer.total_steps=1"]), tmp_path / "run")
    train(run_dir)
    ckpt = list_checkpoints(run_dir)[-1]
    assert ckpt.name == "step_1" and (ckpt / "profile.json").is_file()
    config = run_dir / "config.yaml"
    original = config.read_text()
    edited = yaml.safe_load(original)
    edited["model"].update(path="tiny:judge", dtype="bfloat16")
    config.write_text(yaml.safe_dump(edited))
    result = CliRunner().invoke(app, ["train", "--resume", str(run_dir), "--steps", "2", "--console", "none"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, lines
    assert "model.path='tiny:judge' (trained with 'tiny:policy')" in lines[0], lines[0]
    assert "model.dtype='bfloat16' (trained with 'float32')" in lines[0] and "checkpoint step_1" in lines[0]
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_1"]  # nothing ran, nothing removed
    restored = yaml.safe_load(original)
    restored["actor"]["lr"] = restored["actor"]["lr"] / 2  # the model restored, the learning rate edited: taken, said
    restored["actor"]["weight_decay"] = 0.25
    config.write_text(yaml.safe_dump(restored))
    result = CliRunner().invoke(app, ["train", "--resume", str(run_dir), "--steps", "2", "--console", "plain"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note: ")]
    lr = yaml.safe_load(original)["actor"]["lr"]
    assert notes == [
        "note: resuming step_1 with settings edited since it was saved: "
        f"actor.lr ({lr!r} -> {lr / 2!r}), actor.weight_decay (0.0 -> 0.25)"
    ]
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_1", "step_2"]
    # taken, not only said: the optimizer's saved lr and weight decay used to win (step 2 trained at the old rate)
    assert [row["actor/lr"] for row in read_metrics(run_dir / "metrics.jsonl") if row["step"]] == [lr, lr / 2]
    saved = torch.load(list_checkpoints(run_dir)[-1] / "state.pt", map_location="cpu", weights_only=True)
    groups = saved["actor"]["optimizer"]["param_groups"]
    assert {(g["lr"], g["initial_lr"], g["weight_decay"]) for g in groups} == {(lr / 2, lr / 2, 0.25)}


@pytest.mark.parametrize("damage", ["state.pt cut short", "state.pt missing", "model/ missing"])
def test_a_damaged_checkpoint_says_what_is_wrong_and_what_to_delete(tmp_path, damage):
    """A copy cut short, a file lost: one line naming the checkpoint and the part, and how to go on."""
    run_dir = start_run(load_profile("tiny-rule", SMALL + ["trainer.total_steps=1"]), tmp_path / "run")
    train(run_dir)
    (ckpt,) = list_checkpoints(run_dir)
    state = ckpt / "state.pt"
    if damage == "state.pt cut short":
        state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    elif damage == "state.pt missing":
        state.unlink()
    else:
        shutil.rmtree(ckpt / "model")
    code, lines = _resume(run_dir, "--steps", "2")
    assert code == 1 and len(lines) == 1, lines
    said = {
        "state.pt cut short": "error: checkpoint step_1: state.pt is damaged (",
        "state.pt missing": "error: checkpoint step_1 is incomplete (state.pt is missing): ",
        "model/ missing": "error: checkpoint step_1 is incomplete (model/ is missing): ",
    }[damage]
    assert lines[0].startswith(said), lines[0]
    assert lines[0].endswith(
        "delete that checkpoint folder to resume from an earlier one (none left: the run starts from step 0)"
    ), lines[0]


def test_a_run_resumed_without_a_checkpoint_starts_over_with_one_step_0_row(tmp_path):
    # the old step 0 (held-out accuracy, canaries) was kept and a new one written beside it: [0, 0, 1]
    overrides = [*SMALL, "trainer.total_steps=1", "trainer.val_every=1", "trainer.val_before_train=true"]
    run_dir = start_run(load_profile("tiny-rule", [*overrides, "data.val_size=2"]), tmp_path / "run")
    train(run_dir)
    shutil.rmtree(run_dir / "checkpoints")  # as if killed before its first checkpoint was written
    train(run_dir)
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [0, 1]


def test_a_resume_keeps_its_kl_reference_when_the_models_name_has_come_to_mean_another_build(
    tmp_path, tiny_policy_path, monkeypatch
):
    """`tiny:policy` (or a hub id) re-resolved at the resume: after an upgrade (the recipe's v2 -> v3) or with
    another RLRM_MODELS_DIR it named another model, and the KL loss pulled the policy towards it without a word
    (actor/kl_loss 0, 0 -> 2.17 at the first resumed step). The run keeps the reference it was started with."""
    import safetensors.torch

    from rlrm.engine import components

    builds = {}
    for name, shift in (("v2", 0.0), ("v3", 0.5)):
        folder = shutil.copytree(tiny_policy_path, tmp_path / name)
        weights = safetensors.torch.load_file(folder / "model.safetensors")
        safetensors.torch.save_file({k: v + shift for k, v in weights.items()}, folder / "model.safetensors")
        builds[name] = folder
    resolves = {"tiny:policy": builds["v2"]}
    monkeypatch.setattr(components, "resolve_model_path", lambda path, *a: str(resolves.get(path, path)))
    sets = [*SMALL, "actor.use_kl_loss=true", "actor.kl_loss_coef=0.5", "actor.lr=1e-6"]
    run_dir = start_run(load_profile("tiny-rule", [*sets, "trainer.total_steps=2"]), tmp_path / "run")
    train(run_dir)

    resolves["tiny:policy"] = builds["v3"]  # an upgrade later
    (run_dir / "config.yaml").write_text(
        (run_dir / "config.yaml").read_text().replace("total_steps: 2", "total_steps: 3")
    )
    train(run_dir)
    kl = [row["actor/kl_loss"] for row in read_metrics(run_dir / "metrics.jsonl") if row["step"]]
    assert len(kl) == 3 and max(kl) < 1e-3, kl  # against v3 it read 0, 0, > 1

    shutil.rmtree(builds["v2"])  # the run's reference is gone: one line, nothing trained
    (run_dir / "config.yaml").write_text(
        (run_dir / "config.yaml").read_text().replace("total_steps: 3", "total_steps: 4")
    )
    with pytest.raises(ConfigError, match=r"model.path tiny:policy now names .*v3, another model than the run's KL"):
        train(run_dir)
    assert len(read_metrics(run_dir / "metrics.jsonl")) == 3


def test_a_resume_of_a_checkpoint_an_earlier_rlrm_saved_names_the_settings_added_since(tmp_path):
    """Keys an upgrade added take their defaults in a resumed run (the guard's confirm_steps went 1 -> 3, the
    seq-mean-token-sum-norm divisor changed): said in one note, where it was silent."""
    import json

    run_dir = start_run(load_profile("tiny-rule", SMALL + ["trainer.total_steps=1"]), tmp_path / "run")
    train(run_dir)
    (ckpt,) = list_checkpoints(run_dir)
    saved = json.loads((ckpt / "profile.json").read_text())
    del saved["reward"]["guard"]["confirm_steps"], saved["actor"]["loss_scale_factor"]  # as an earlier rlrm wrote it
    (ckpt / "profile.json").write_text(json.dumps(saved))
    result = CliRunner().invoke(app, ["train", "--resume", str(run_dir), "--steps", "2", "--console", "plain"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note: ")]
    assert notes == [
        "note: step_1 was saved by an earlier rlrm; settings added since: actor.loss_scale_factor=None, "
        "reward.guard.confirm_steps=3"
    ]
