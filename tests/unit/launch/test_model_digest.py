"""A model folder's digest (rlrm/launch/common/model_digest.py): a copy is the same model, another file is not."""

from __future__ import annotations

import os
import shutil

from rlrm.launch.common import model_digest


def test_a_copy_is_the_same_model_and_a_changed_end_is_another(tmp_path, monkeypatch):
    """Copies without their times (`cp -r`, a second download, a restore) must keep a run's reward contract and its
    KL reference: a time in the digest refused their resumes and emptied their caches."""
    monkeypatch.setattr(model_digest, "SAMPLED_FROM", 64)
    monkeypatch.setattr(model_digest, "SAMPLE_BYTES", 8)
    source = tmp_path / "a"
    source.mkdir()
    (source / "model.safetensors").write_bytes(b"H" * 8 + b"a" * 100 + b"T" * 8)  # past SAMPLED_FROM: sampled
    (source / "config.json").write_text("{}")
    copy = shutil.copytree(source, tmp_path / "b")
    os.utime(copy / "model.safetensors", ns=(5, 5))
    assert model_digest.folder_digest(copy) == model_digest.folder_digest(source)
    (copy / "model.safetensors").write_bytes(b"H" * 8 + b"a" * 100 + b"U" * 8)  # its last bytes differ
    assert model_digest.folder_digest(copy) != model_digest.folder_digest(source)


def test_a_reward_server_reports_its_weights_a_hub_id_or_a_policy_nothing(tmp_path):
    """A hub id has no folder here: it reported the digest of nothing, one for every hub model (two hub judges
    served under one name were one contract again). A policy's weights change with each sync."""
    from rlrm.launch.server.app import _reward_identity
    from rlrm.launch.server.backends import ServerConfig

    (tmp_path / "model.safetensors").write_bytes(b"w")
    judge = _reward_identity(ServerConfig(model_path=str(tmp_path), role="genrm"))
    assert judge == {"weights": model_digest.folder_digest(tmp_path), "dtype": "float32"}
    assert _reward_identity(ServerConfig(model_path="Qwen/Qwen3-8B", role="genrm")) == {}
    assert _reward_identity(ServerConfig(model_path=str(tmp_path), role="policy")) == {}
