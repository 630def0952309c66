"""A model folder's digest (rlrm/launch/common/model_digest.py): weights re-saved in place are another model."""

from __future__ import annotations

import os

from rlrm.launch.common import model_digest


def test_a_large_file_rewritten_in_its_middle_is_another_digest(tmp_path, monkeypatch):
    """A file past SAMPLED_FROM is read at its two ends only: an MLP-only fine-tune re-saved in place kept the
    size, the header and both ends, and with them the reward contract (one judge's cached verdicts served the
    other's run). Its modification time is part of the digest now."""
    monkeypatch.setattr(model_digest, "SAMPLED_FROM", 64)
    monkeypatch.setattr(model_digest, "SAMPLE_BYTES", 8)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"H" * 8 + b"a" * 100 + b"T" * 8)
    os.utime(weights, ns=(1_000_000_000, 1_000_000_000))
    before = model_digest.folder_digest(tmp_path)
    weights.write_bytes(b"H" * 8 + b"b" * 100 + b"T" * 8)  # the middle changed: the sampled bytes did not
    assert model_digest.folder_digest(tmp_path) != before
    os.utime(weights, ns=(1_000_000_000, 1_000_000_000))  # the same time again: only the ends are read
    assert model_digest.folder_digest(tmp_path) == before
    (tmp_path / "config.json").write_text("{}")  # a small file is read whole, whatever its time
    with_config = model_digest.folder_digest(tmp_path)
    os.utime(tmp_path / "config.json", ns=(5, 5))
    assert model_digest.folder_digest(tmp_path) == with_config
