"""The reward-hacking guard (rlrm/engine/metrics/guard.py) on hand-made metric rows."""

from __future__ import annotations

import pytest

from rlrm.config.reward_guard import GuardConfig
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


def test_an_unknown_guard_action_is_refused():
    with pytest.raises(ValueError, match="on_divergence"):
        GuardConfig(on_divergence="halt")


def _healthy(seed: int, steps: int = 100) -> list[dict]:
    """The reward rises; the true agreement stays 0.8, measured on 256 samples a step (sd 0.025)."""
    import random

    rng = random.Random(seed)
    agreement = (sum(rng.random() < 0.8 for _ in range(256)) / 256 for _ in range(steps))
    return [_step(s, 0.3 + 0.005 * s + rng.gauss(0, 0.02), a) for s, a in zip(range(1, steps + 1), agreement)]


def test_the_default_guard_judges_a_full_window_and_rarely_stops_a_healthy_run():
    # it judged 3 steps at step 3 (agreement 0.82, 0.80, 0.765: one sd) and flagged 28 of 200 healthy 100-step runs
    early = DivergenceGuard(GuardConfig())
    assert all(early.observe(_step(s, 0.3 + 0.01 * s, 0.82 - 0.028 * s)) is None for s in range(1, 21))
    flagged = sum(
        any(guard.observe(row) is not None for row in _healthy(seed))
        for seed, guard in ((seed, DivergenceGuard(GuardConfig())) for seed in range(100))
    )
    assert flagged <= 5
