"""The run folder's own files: `--resume --steps N` rewrites config.yaml whole or not at all."""

from __future__ import annotations

import errno
import pathlib

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.run_folder import is_run_folder, load_run_profile, start_run


def test_a_resume_whose_config_rewrite_fails_leaves_the_old_config_whole(tmp_path, monkeypatch):
    # written in place, a full disk left config.yaml cut: the folder was no run any more and could not be resumed
    run = start_run(load_profile("tiny-rule"), tmp_path / "run")
    before = (run / "config.yaml").read_text()
    real = pathlib.Path.write_text

    def a_third_then_full(self, data, *args, **kwargs):
        real(self, data[: len(data) // 3], *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", a_third_then_full)
    with pytest.raises(OSError, match="No space left"):
        load_run_profile(run, total_steps=99)
    monkeypatch.setattr(pathlib.Path, "write_text", real)
    assert is_run_folder(run) and (run / "config.yaml").read_text() == before
    assert sorted(p.name for p in run.iterdir() if p.name.startswith("config")) == ["config.yaml"]
    assert load_run_profile(run, total_steps=99).trainer.total_steps == 99
