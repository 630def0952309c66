"""GRPO with the calculator tool raises held-out accuracy on the tiny tools policy, and the learning test fails when
observations are trained on (slow: 15-step training runs; the model's checks are in
tests/unit/engine/models/test_tool_learning.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train
from tests.unit.engine.models.test_tool_learning import ACCURACY_RISE, LEARNING_STEPS


def tiny_tools_run(tmp_path: Path, steps: int, extra: list[str] = ()) -> list[dict]:
    """`tiny-tools` for `steps` GRPO steps, validated before and after; the metrics rows."""
    profile = load_profile(
        "tiny-tools",
        [
            f"trainer.total_steps={steps}",
            f"trainer.val_every={steps}",
            "trainer.save_every=0",
            "trainer.num_threads=2",
            "logging.console=none",
            *extra,
        ],
    )
    run_dir = start_run(profile, tmp_path / "tools")
    assert train(run_dir).last_step == steps
    return read_metrics(run_dir / "metrics.jsonl")


def learning_failures(rows: list[dict]) -> list[str]:
    """What a sync tiny-tools run failed to show of learning with the tool (empty: it learned, with the maths intact)."""
    accuracy = [r["val/accuracy"] for r in rows if "val/accuracy" in r]  # before the first step, after the last
    failures = []
    if accuracy[-1] < accuracy[0] + ACCURACY_RISE:
        failures.append(f"held-out accuracy with the tool {accuracy[0]:.3f} -> {accuracy[-1]:.3f}")
    # on-policy, one update per step: the loss's tokens were sampled by these very weights, so the PPO ratio
    # is 1 on every one of them; an observation token in the loss (rollout log-prob 0) breaks that at once
    kl = max(abs(r["actor/ppo_kl"]) for r in rows if "actor/ppo_kl" in r)
    if kl >= 0.01:
        failures.append(f"actor/ppo_kl up to {kl:.3f}: tokens in the loss that were not sampled")
    return failures


@pytest.mark.slow
def test_grpo_raises_held_out_accuracy_with_the_calculator(tmp_path, tiny_tools_path):
    # without a call the answer is a guess at a three-digit sum or product (reward ~0), with one it is right
    # when the operands were copied right: GRPO raises the share of right calls, and so held-out accuracy
    assert learning_failures(tiny_tools_run(tmp_path, LEARNING_STEPS)) == []


def mask_everything(monkeypatch) -> None:
    """Break the observation mask: every response token in the loss, tool observations included."""
    import rlrm.engine.actor.batch as batch_module

    collate = batch_module.collate

    def broken(completions, pad_token_id):
        batch = collate(completions, pad_token_id)
        batch.response_mask = batch.attention_mask[:, -batch.response_length :].float()  # [B, R]: 1 on every token
        return batch

    monkeypatch.setattr(batch_module, "collate", broken)


@pytest.mark.slow
def test_the_learning_test_fails_when_observations_are_trained_on(tmp_path, tiny_tools_path, monkeypatch):
    mask_everything(monkeypatch)
    failures = learning_failures(tiny_tools_run(tmp_path, LEARNING_STEPS))
    assert failures, "the same run with observation tokens in the loss passed the learning test"
