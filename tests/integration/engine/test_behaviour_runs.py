"""Old log-probs: recomputed by the actor or taken from the rollout engine (`actor.recompute_old_log_prob`)."""

from __future__ import annotations

import pytest
from small_run import SMALL_RUN

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train

SMALL = [*SMALL_RUN, "trainer.total_steps=1"]


@pytest.mark.parametrize(("setting", "recomputed"), [("auto", False), ("always", True), ("auto-2-epochs", True)])
def test_sync_step_recomputes_only_when_told(tmp_path, tiny_policy_path, setting, recomputed):
    extra = (
        ["actor.ppo_epochs=2", "actor.recompute_old_log_prob=auto"]
        if setting == "auto-2-epochs"
        else [f"actor.recompute_old_log_prob={setting}"]
    )
    run_dir = start_run(load_profile("tiny-rule", SMALL + extra), tmp_path / setting)
    train(run_dir)
    (row,) = read_metrics(run_dir / "metrics.jsonl")
    # The gap to the engine's log-probs is measured only when the actor recomputed them.
    assert ("rollout/log_prob_diff_max" in row) is recomputed
    if recomputed:
        assert row["rollout/log_prob_diff_max"] < 1e-4  # the engine's log-probs are the actor's up to float noise
