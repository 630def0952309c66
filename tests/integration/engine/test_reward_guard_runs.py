"""The reward-hacking guard: the audit's divergence check live on the last window of steps, and a run it stops."""

from __future__ import annotations

from rlrm.engine.metrics.guard import DivergenceGuard


def test_reward_guard_stop_ends_the_run_after_the_flagged_step_named(tmp_path, tiny_policy_path, monkeypatch):
    """The wiring: a guard that flags step 2 stops a 5-step run there, with guard/divergence in metrics.jsonl."""
    from rlrm.config.loader import load_profile
    from rlrm.engine.metrics import audit
    from rlrm.engine.metrics.metrics_file import read_metrics
    from rlrm.engine.trainer import start_run, train

    def flag_from_step_2(self, row):
        self._keep(row)
        if row["step"] < 2:
            return None
        self.flagged_at = self.flagged_at or row["step"]
        return audit.Finding("divergence", "flagged", "steps 0-2: critic/score/mean rising while ... (test)")

    monkeypatch.setattr(DivergenceGuard, "observe", flag_from_step_2)
    overrides = [
        "data.train_batch_size=4",
        "actor.mini_batch_size=4",
        "rollout.n=2",
        "rollout.max_new_tokens=8",
        "trainer.val_every=0",
        "trainer.val_before_train=false",
        "trainer.num_threads=1",
        "trainer.total_steps=5",
        "logging.console=none",
        "reward.guard.on_divergence=stop",
    ]
    run = start_run(load_profile("tiny-rule", overrides), tmp_path / "run")
    result = train(run)
    assert result.last_step == 2 and result.stopped.startswith("stopped at step 2 by the reward-hacking guard")
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["guard/divergence"] for r in rows] == [0.0, 1.0]
