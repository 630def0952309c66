"""Checkpoint state in process: loads with weights_only and restores every RNG; non-finite weights are never saved."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from rlrm.config.schema import ActorConfig
from rlrm.engine.checkpoint import list_checkpoints, load_state, save_checkpoint


def _actor_after_one_step(tiny_policy_path):
    from transformers import AutoModelForCausalLM

    from rlrm.engine.actor.actor import Actor

    model = AutoModelForCausalLM.from_pretrained(tiny_policy_path)
    actor = Actor(model, None, ActorConfig(warmup_steps=3), temperature=1.0, total_steps=10, n=2)
    for p in actor.params:
        p.grad = torch.full_like(p, 1e-3)
    actor.optimizer.step()
    actor.scheduler.step()
    return model, actor


def test_state_loads_with_weights_only_and_restores_every_rng_exactly(tmp_path, tiny_policy_path):
    from transformers import AutoTokenizer

    model, actor = _actor_after_one_step(tiny_policy_path)
    tok = AutoTokenizer.from_pretrained(tiny_policy_path)
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    np.random.normal()  # numpy now holds a cached gaussian: part of its state
    ckpt = save_checkpoint(
        tmp_path, 1, model, tok, {"actor": actor.state_dict(), "loader": {"epoch": 0, "cursor": 4}}, keep=2
    )
    expected = (random.random(), np.random.normal(), torch.rand(3).tolist())

    raw = torch.load(ckpt / "state.pt", weights_only=True)  # the only way rlrm reads it
    assert isinstance(raw["rng"]["numpy"]["keys"], torch.Tensor) and isinstance(
        raw["rng"]["python"]["state"], torch.Tensor
    )
    state = load_state(ckpt)
    assert (random.random(), np.random.normal(), torch.rand(3).tolist()) == expected
    assert state["step"] == 1 and state["loader"] == {"epoch": 0, "cursor": 4}
    _, other = _actor_after_one_step(tiny_policy_path)
    other.load_state_dict(state["actor"])
    assert other.scheduler.last_epoch == actor.scheduler.last_epoch == 1
    for p, q in zip(actor.params, other.params):
        a, b = actor.optimizer.state[p], other.optimizer.state[q]
        assert torch.equal(a["exp_avg"], b["exp_avg"]) and torch.equal(a["exp_avg_sq"], b["exp_avg_sq"])


def test_gpu_rng_states_are_kept_and_a_cpu_machine_resumes_without_them(tmp_path, tiny_policy_path):
    """A run on the CPU saves no GPU state (and starts no CUDA context); a state saved on a GPU machine (one
    16-byte Philox state per GPU) and one from before GPU states were saved both resume here, every CPU RNG
    restored. That the GPU states come back on a GPU: tests/gpu/test_cuda_numbers.py."""
    from transformers import AutoTokenizer

    model, actor = _actor_after_one_step(tiny_policy_path)
    tok = AutoTokenizer.from_pretrained(tiny_policy_path)
    torch.manual_seed(5)
    ckpt = save_checkpoint(tmp_path, 1, model, tok, {"actor": actor.state_dict(), "loader": {}}, keep=3)
    expected = torch.rand(3).tolist()
    raw = torch.load(ckpt / "state.pt", weights_only=True)
    assert len(raw["rng"]["cuda"]) == (torch.cuda.device_count() if torch.cuda.is_initialized() else 0)
    for cuda in ([torch.zeros(16, dtype=torch.uint8)] * 2, None):
        if cuda is None:
            del raw["rng"]["cuda"]
        else:
            raw["rng"]["cuda"] = cuda
        torch.save(raw, ckpt / "state.pt")
        torch.manual_seed(6)
        load_state(ckpt)
        assert torch.rand(3).tolist() == expected


def test_non_finite_weights_are_never_saved(tmp_path, tiny_policy_path, capsys):
    from transformers import AutoTokenizer

    model, actor = _actor_after_one_step(tiny_policy_path)
    name, param = next(iter(model.named_parameters()))
    with torch.no_grad():
        param[0] = float("inf")
    tok = AutoTokenizer.from_pretrained(tiny_policy_path)
    capsys.readouterr()  # what loading printed (transformers' "Loading weights" bar, when this test runs alone)
    assert save_checkpoint(tmp_path, 7, model, tok, {"actor": actor.state_dict(), "loader": {}}, keep=2) is None
    assert list_checkpoints(tmp_path) == [] and not (tmp_path / "checkpoints" / "step_7.tmp").exists()
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [f"warning: checkpoint step_7 not saved: parameter {name} holds NaN or inf"]


def test_a_save_clears_what_saves_killed_midway_left(tmp_path, tiny_policy_path):
    from transformers import AutoTokenizer

    model, actor = _actor_after_one_step(tiny_policy_path)
    tok = AutoTokenizer.from_pretrained(tiny_policy_path)
    for step in (3, 4):  # a save killed before its rename: never listed, never resumed from, left on disk
        (tmp_path / "checkpoints" / f"step_{step}.tmp" / "model").mkdir(parents=True)
    save_checkpoint(tmp_path, 5, model, tok, {"actor": actor.state_dict(), "loader": {}}, keep=2)
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step_5"]


def test_a_resume_naming_another_model_is_refused_naming_each_key(tmp_path):
    import json

    from rlrm.engine.checkpoint import MODEL_KEYS_FILE, PROFILE_FILE, check_resume_model
    from rlrm.errors import ConfigError, ModelError

    trained = {"path": "tiny:policy", "dtype": "float32", "precision": "mixed", "ref_path": None}
    ckpt = tmp_path / "step_3"
    ckpt.mkdir()
    check_resume_model(ckpt, dict(trained, path="elsewhere"))  # a checkpoint from before the record: not checked
    (ckpt / MODEL_KEYS_FILE).write_text(json.dumps(trained))
    check_resume_model(ckpt, dict(trained))  # the same model: resumes
    with pytest.raises(ConfigError) as refused:
        check_resume_model(ckpt, dict(trained, path="/models/other", ref_path="/models/ref"))
    message = str(refused.value)
    assert "checkpoint step_3" in message and "\n" not in message
    assert "model.path='/models/other' (trained with 'tiny:policy')" in message
    assert "model.ref_path='/models/ref' (trained with None)" in message and "dtype" not in message
    (ckpt / MODEL_KEYS_FILE).write_text("{cut")
    with pytest.raises(ModelError, match="model_keys.json is damaged"):
        check_resume_model(ckpt, dict(trained))
    (ckpt / PROFILE_FILE).write_text(json.dumps({"model": trained}))  # today's record: the whole profile
    check_resume_model(ckpt, dict(trained))
    with pytest.raises(ConfigError, match=r"model.dtype='bfloat16' \(trained with 'float32'\)"):
        check_resume_model(ckpt, dict(trained, dtype="bfloat16"))


def test_settings_edited_since_a_checkpoint_are_named_with_both_values_and_the_budget_is_not_one(tmp_path):
    import json

    from rlrm.engine.checkpoint import PROFILE_FILE, changed_settings
    from rlrm.errors import ModelError

    saved = {"actor": {"lr": 1e-6, "kl_coef": 0.0}, "trainer": {"total_steps": 10, "seed": 1}, "reward": {"rule": {}}}
    ckpt = tmp_path / "step_4"
    ckpt.mkdir()
    assert changed_settings(ckpt, saved) == []  # a checkpoint that recorded no profile: nothing to compare
    (ckpt / PROFILE_FILE).write_text(json.dumps(saved))
    assert changed_settings(ckpt, json.loads(json.dumps(saved))) == []
    now = {
        "actor": {"lr": 5e-7, "kl_coef": 0.0},
        "trainer": {"total_steps": 40, "seed": 1},
        "reward": {"rule": {"x": 1}},
    }
    assert changed_settings(ckpt, now) == ["actor.lr (1e-06 -> 5e-07)"]  # reward.rule.x: new since, a default
    now["reward"]["allow_contract_change"] = True  # this resume's own --set, not an edit
    assert changed_settings(ckpt, now) == ["actor.lr (1e-06 -> 5e-07)"]
    (ckpt / PROFILE_FILE).write_text("[1, 2")
    with pytest.raises(ModelError, match="profile.json is damaged"):
        changed_settings(ckpt, now)


def test_a_checkpoint_is_on_disk_before_it_is_named_complete_and_older_ones_go(tmp_path, tiny_policy_path, monkeypatch):
    # it was renamed into place, and older ones pruned, while its bytes could still be in the page cache only: a
    # power loss then left no checkpoint at all
    import os

    from transformers import AutoTokenizer

    model, actor = _actor_after_one_step(tiny_policy_path)
    tok = AutoTokenizer.from_pretrained(tiny_policy_path)
    synced, real_fsync, real_rename = [], os.fsync, os.rename
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    renamed_after = []
    monkeypatch.setattr(os, "rename", lambda a, b: (renamed_after.append(len(synced)), real_rename(a, b)))
    save_checkpoint(tmp_path, 5, model, tok, {"actor": actor.state_dict(), "loader": {}}, keep=2)
    tmp = str(tmp_path / "checkpoints" / "step_5.tmp")
    before = synced[: renamed_after[0]]
    assert {f"{tmp}/state.pt", f"{tmp}/model/model.safetensors", f"{tmp}/model", tmp} <= set(before)
    assert synced[-1] == str(tmp_path / "checkpoints")  # the rename, flushed


def test_settings_added_since_are_the_schemas_own_not_a_users_new_mapping_entry(tmp_path):
    """An entry a user adds to an open mapping (reward.component_weights) was listed as a setting an earlier rlrm
    did not have."""
    import json

    from rlrm.config.schema import Profile
    from rlrm.engine.checkpoint import PROFILE_FILE, added_settings

    now = Profile().model_dump(mode="json")
    saved = json.loads(json.dumps(now))
    del saved["reward"]["guard"]["confirm_steps"]  # as an earlier rlrm wrote it
    (tmp_path / PROFILE_FILE).write_text(json.dumps(saved))
    now["reward"]["component_weights"] = {"rule": 0.5}
    assert added_settings(tmp_path, now) == ["reward.guard.confirm_steps=3"]


def test_the_kl_reference_is_recorded_by_its_real_folder(tmp_path, monkeypatch):
    """A link moved to another build later, or a relative path resumed from another folder, named another model."""
    from rlrm.engine.components import model_reference

    (tmp_path / "v3").mkdir()
    (tmp_path / "v3" / "model.safetensors").write_bytes(b"w")
    (tmp_path / "current").symlink_to(tmp_path / "v3")
    monkeypatch.chdir(tmp_path)
    assert model_reference("current")["path"] == str((tmp_path / "v3").resolve())
    assert model_reference("Qwen/Qwen3-8B") is None  # a hub id: not pinned


def test_the_export_stops_where_the_run_stopped(tmp_path, tiny_policy_path):
    # a base model given an instruct chat template: its generation config names <|endoftext|> only, the run ended
    # responses at the tokenizer's <|im_end|> too, and HF generate on the export ran past it (accuracy 0.031
    # against the run's 0.375)

    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(tiny_policy_path)
    tok = AutoTokenizer.from_pretrained(tiny_policy_path)
    base_eos = next(i for i in range(10) if i != tok.eos_token_id)
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = base_eos, None
    ckpt = save_checkpoint(tmp_path, 1, model, tok, {"loader": {"epoch": 0, "cursor": 0}}, keep=1)
    saved = GenerationConfig.from_pretrained(ckpt / "model")
    assert sorted(saved.eos_token_id) == sorted({base_eos, tok.eos_token_id})
    assert saved.pad_token_id == tok.pad_token_id
    assert (model.generation_config.eos_token_id, model.generation_config.pad_token_id) == (base_eos, None)
