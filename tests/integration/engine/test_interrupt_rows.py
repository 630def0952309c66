"""A run stopped after a step completed but before its row was written: the checkpoint and metrics.jsonl agree.

An interrupt during the canary check that follows a step (reward.guard.on_canary) checkpointed that step while its
row was never written: a resume from it left the step missing from metrics.jsonl for good."""

from __future__ import annotations

import asyncio

from small_run import SMALL_RUN

from rlrm.config.loader import load_profile
from rlrm.engine.checkpoint import list_checkpoints
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import _TrainLoop, start_run, train


def test_an_interrupt_in_the_canary_check_after_a_step_keeps_its_row(tmp_path, tiny_policy_path, monkeypatch):
    real = _TrainLoop._check_canaries

    async def interrupted_after_step_2(self, step, row, display):
        if step == 2:
            raise asyncio.CancelledError  # Ctrl-C while the canaries of step 2 are scored
        return await real(self, step, row, display)

    monkeypatch.setattr(_TrainLoop, "_check_canaries", interrupted_after_step_2)
    sets = ["trainer.total_steps=4", "reward.guard.on_canary=warn", "reward.guard.canary_every=1"]
    run_dir = start_run(load_profile("tiny-rule", [*SMALL_RUN, *sets]), tmp_path / "run")
    result = train(run_dir)
    assert result.interrupted and result.last_step == 2
    logged = [r["step"] for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] > 0]
    assert logged == [1, 2] and [c.name for c in list_checkpoints(run_dir)] == ["step_2"]


def test_a_crash_in_the_validation_after_a_periodic_checkpoint_keeps_no_checkpoint_past_the_rows(tmp_path, monkeypatch):
    """save_every and val_every meet: the checkpoint was written, and named complete, inside the step, before its
    held-out evaluation and its row. A crash there (a rollout server that died; a kill -9 alike) kept step_2 with
    rows [1]: a resume went on from step 3 and row 2 was missing for good. It is named complete after its row now."""
    import rlrm.engine.trainer as trainer

    real = trainer.evaluate_held_out
    calls = []

    async def dies_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:  # step 2's held-out evaluation
            raise RuntimeError("rollout server died")
        return await real(*args, **kwargs)

    monkeypatch.setattr(trainer, "evaluate_held_out", dies_once)
    sets = ["trainer.total_steps=4", "trainer.save_every=2", "trainer.val_every=2", "trainer.val_before_train=false"]
    run_dir = start_run(load_profile("tiny-rule", [*SMALL_RUN, *sets]), tmp_path / "run")
    try:
        train(run_dir)
    except RuntimeError as exc:
        assert "rollout server died" in str(exc)
    else:
        raise AssertionError("the run did not stop")
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [1]
    assert list_checkpoints(run_dir) == [] and not list((run_dir / "checkpoints").glob("*"))  # nor its unfinished copy
    train(run_dir)  # the resume: from the start, as nothing past the rows is kept
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [1, 2, 3, 4]
    assert [c.name for c in list_checkpoints(run_dir)][-1] == "step_4"
