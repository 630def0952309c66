"""A train split smaller than one batch repeats prompts within every step (nothing else can fill the batch): the run
says so when it starts, instead of training duplicate groups without a word."""

from __future__ import annotations

from small_run import SMALL_RUN

from rlrm.config.loader import load_profile
from rlrm.engine.trainer import start_run, train
from rlrm.launch.common import progress


def test_a_train_split_smaller_than_a_batch_is_named_when_the_run_starts(tmp_path, tiny_policy_path, capfd):
    profile = load_profile("tiny-rule", [*SMALL_RUN, "data.synthetic.num_train=3", "trainer.total_steps=1"])
    progress.enable()  # as `rlrm train` does, unless --console none
    try:
        assert train(start_run(profile, tmp_path / "run")).last_step == 1
    finally:
        progress.enable(False)
    assert "the train split has 3 prompts, fewer than data.train_batch_size=4" in capfd.readouterr().err
