"""The reward-hacking guard: the audit's divergence check live on the last window of steps, and a run it stops."""

from __future__ import annotations

import pytest

from rlrm.config.reward import GuardConfig
from rlrm.engine.metrics.guard import DivergenceGuard


def _step(s: int, reward: float, agreement: float) -> dict:
    return {"step": s, "critic/score/mean": reward, "reward/rule_agreement": agreement}


def _hacked(s: int) -> dict:
    """The reward climbs 0.015 a step while agreement with the rule falls 0.012 a step (from step 10 on)."""
    drift = max(0, s - 10)
    return _step(s, 0.1 + 0.015 * drift + 0.001 * (s % 3), 0.98 - 0.012 * drift + 0.001 * (s % 2))


def test_the_guard_flags_the_first_window_where_the_reward_and_the_rule_part_ways():
    guard = DivergenceGuard(GuardConfig(on_divergence="warn", window=10))
    flagged = [s for s in range(1, 40) if guard.observe(_hacked(s)) is not None]
    assert flagged and flagged[0] == guard.flagged_at
    assert 13 <= guard.flagged_at <= 20  # within 10 steps of the drift's start: agreement then fell < 0.12
    fell = 0.012 * (guard.flagged_at - 10)
    assert fell >= 0.05  # min_drop


def test_a_healthy_run_is_never_flagged_and_off_checks_nothing():
    healthy = DivergenceGuard(GuardConfig(window=10))
    assert all(healthy.observe(_step(s, 0.1 + 0.01 * s, 0.97 + 0.001 * (s % 3))) is None for s in range(1, 60))
    off = DivergenceGuard(GuardConfig(on_divergence="off", window=10))
    assert all(off.observe(_hacked(s)) is None for s in range(1, 40))


def test_a_resumed_guard_keeps_its_window():
    rows = [_hacked(s) for s in range(1, 25)]
    resumed = DivergenceGuard(GuardConfig(window=10), history=rows[:-1])
    assert resumed.observe(rows[-1]) is not None


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


def test_an_unknown_guard_action_is_refused():
    with pytest.raises(ValueError, match="on_divergence"):
        GuardConfig(on_divergence="halt")
