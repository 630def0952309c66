"""The run folder deleted while the run goes on (`rm -rf runs/x` by mistake, a clean-up job): the run stops with one
error naming it. It went on writing rows into files no folder held, made `checkpoints/` again, and returned as a
success, leaving a folder with a checkpoint and no config.yaml that `--resume` refused."""

from __future__ import annotations

import shutil

import pytest
from small_run import SMALL_RUN

from rlrm.config.loader import load_profile
from rlrm.engine.metrics import metrics_file
from rlrm.engine.trainer import start_run, train
from rlrm.errors import RunFolderError


@pytest.mark.parametrize("save_every", [1, 0])  # the next checkpoint finds it gone; or the next metrics row does
def test_a_run_whose_folder_is_removed_stops_naming_it(tmp_path, monkeypatch, save_every):
    run_dir = tmp_path / "run"
    real = metrics_file.MetricsWriter.log

    def log(self, row):
        real(self, row)
        if self.path.name == "metrics.jsonl" and row.get("step") == 1:
            shutil.rmtree(run_dir)

    monkeypatch.setattr(metrics_file.MetricsWriter, "log", log)
    settings = [*SMALL_RUN, "trainer.total_steps=3", f"trainer.save_every={save_every}"]
    start_run(load_profile("tiny-rule", settings), run_dir)
    with pytest.raises(RunFolderError, match="was removed while the run went on"):
        train(run_dir)
    assert not run_dir.exists()  # nothing made again
