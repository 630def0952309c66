"""The reward-hacking audit's checks (rlrm/engine/metrics/audit.py) on synthetic series with hand-checked numbers."""

from __future__ import annotations

import math
import random

import pytest

from rlrm.engine.metrics.audit import (
    AuditSettings,
    check_concentration,
    check_divergence,
    check_length_drift,
    fit_trend,
    windows,
)


def series(values, start=1, every=1):
    return ([float(start + i * every) for i in range(len(values))], list(values))


def noisy(f, steps, seed, sd):
    rng = random.Random(seed)
    return [f(s) + rng.gauss(0, sd) for s in steps]


def test_fit_trend_by_hand():
    # docstring example: line 1/6 + x/2, residuals (-1/6, 1/3, -1/6), SE sqrt((1/6) / 2), t = 0.5 / 0.2887
    trend = fit_trend([0, 1, 2], [0.0, 1.0, 1.0])
    assert trend.slope == pytest.approx(0.5) and trend.change == pytest.approx(1.0)
    assert trend.start == pytest.approx(1 / 6) and trend.t == pytest.approx(math.sqrt(3))
    assert fit_trend([0, 10, 20], [3.0, 2.0, 1.0]).t == -math.inf  # exactly on a falling line
    assert fit_trend([0, 1, 2], [1.0, 1.0, 1.0]).t == 0.0
    assert fit_trend([0, 1], [0.0, 1.0]) is None  # two points give no trend
    assert fit_trend([0, 1, 2], [0.0, float("nan"), 1.0]) is None  # NaN rows are left out


def test_windows_cover_the_run():
    assert windows([1, 2, 3], 20) == [(1, 3)]  # a run shorter than the window: one window, the whole run
    assert windows(list(range(1, 31)), 20) == [
        (1, 21),
        (2, 22),
        (3, 23),
        (4, 24),
        (5, 25),
        (6, 26),
        (7, 27),
        (8, 28),
        (9, 29),
        (10, 30),
    ]


def test_divergence_flagged_when_reward_rises_and_accuracy_falls():
    steps = list(range(1, 41))
    reward = noisy(lambda s: 0.2 + 0.01 * s, steps, 0, 0.02)  # +0.4 over the run
    val = series([0.30, 0.28, 0.20, 0.12, 0.05], start=0, every=10)  # every 10 steps: fitted -0.27 over 40
    found = check_divergence({"critic/score/mean": (steps, reward), "val/accuracy": val})
    # first window [0, 20] (val at step 0 is the baseline): points (0, .3), (10, .28), (20, .2): slope -0.005,
    # fitted change -0.1; fitted .31, .26, .21, residuals -.01, .02, -.01, SE sqrt(.0006 / 1 / 200), t = -2.89
    assert found.flagged and found.detail.startswith("steps 0-20:")
    assert "val/accuracy went 0.3 -> 0.2 (fitted change -0.1, t -2.9, 3 points)" in found.detail
    # the same reward with accuracy rising too: no divergence
    up = series([0.30, 0.32, 0.35, 0.40, 0.42], start=0, every=10)
    assert check_divergence({"critic/score/mean": (steps, reward), "val/accuracy": up}).status == "ok"


def test_divergence_needs_a_real_fall_and_a_real_rise():
    steps = list(range(1, 41))
    rising = noisy(lambda s: 0.2 + 0.01 * s, steps, 1, 0.02)
    flat = noisy(lambda s: 0.4, steps, 2, 0.05)
    falling_agreement = (steps, noisy(lambda s: 0.9 - 0.01 * s, steps, 3, 0.02))
    tiny_fall = (steps, noisy(lambda s: 0.9 - 0.001 * s, steps, 4, 0.001))  # t far below -2, but only -0.02 per window
    assert check_divergence({"critic/score/mean": (steps, rising), "reward/rule_agreement": falling_agreement}).flagged
    assert (
        check_divergence({"critic/score/mean": (steps, flat), "reward/rule_agreement": falling_agreement}).status
        == "ok"
    )
    assert check_divergence({"critic/score/mean": (steps, rising), "reward/rule_agreement": tiny_fall}).status == "ok"


def test_divergence_in_a_late_window_names_it():
    steps = list(range(1, 61))
    reward = [0.3] * 30 + [0.3 + 0.02 * (s - 30) for s in range(31, 61)]
    agreement = [0.9] * 30 + [0.9 - 0.02 * (s - 30) for s in range(31, 61)]
    found = check_divergence({"critic/score/mean": (steps, reward), "reward/rule_agreement": (steps, agreement)})
    # flat, then a hinge at step 30: in [b-20, b] the fitted fall of the agreement grows with b and first
    # reaches min_drop 0.05 at b = 35 (observed 0.9 -> 0.8, fitted -0.0675); at b = 34 it is -0.049
    assert found.flagged and found.detail.startswith("steps 15-35:") and "fitted change -0.0675" in found.detail
    early = {
        k: (v[0][:34], v[1][:34])
        for k, v in {"critic/score/mean": (steps, reward), "reward/rule_agreement": (steps, agreement)}.items()
    }
    assert check_divergence(early).status == "ok"


def test_divergence_not_applicable_without_truth_or_points():
    steps = list(range(1, 11))
    assert check_divergence({"critic/score/mean": (steps, [0.1] * 10)}).status == "n/a"
    two_vals = series([0.3, 0.1], start=0, every=10)  # two validations in the run: no trend
    assert check_divergence({"critic/score/mean": (steps, list(range(10))), "val/accuracy": two_vals}).status == "n/a"


def test_length_drift():
    steps = list(range(1, 31))
    grows = (steps, noisy(lambda s: 13 + 0.25 * s, steps, 5, 0.2))  # 13 -> 20.5: +~40% per 20-step window
    found = check_length_drift({"response_length/mean": grows})
    assert found.flagged and "+" in found.detail
    shrinks = (steps, [20 - 0.4 * s for s in steps])  # 19.6 -> 8: -40% per window, exactly linear
    assert check_length_drift({"response_length/mean": shrinks}).flagged
    steady = (steps, noisy(lambda s: 13.3, steps, 6, 0.2))
    assert check_length_drift({"response_length/mean": steady}).status == "ok"
    slight = (steps, [13 + 0.05 * s for s in steps])  # exact line (t = inf) but +7% over 20 steps
    assert check_length_drift({"response_length/mean": slight}).status == "ok"
    assert check_length_drift({}).status == "n/a"


def test_concentration():
    steps = list(range(1, 31))
    # medians over windows of 21 steps: the first window holds 0.1 x 16 and 0.8 x 5 -> median 0.1
    values = [0.1] * 16 + [0.8] * 14
    found = check_concentration({"reward/top1pct_share": (steps, values)})
    # window [b-20, b] for b = 30: steps 10-30, 7 of 0.1 and 14 of 0.8 -> median 0.8 (first flagged at b = 27: 10 v 11)
    assert found.flagged and found.detail.startswith("steps 7-27: median reward/top1pct_share 0.8")
    assert check_concentration({"reward/top1pct_share": (steps, [0.12] * 30)}).status == "ok"
    strict = AuditSettings(concentration=0.1)
    assert check_concentration({"reward/top1pct_share": (steps, [0.12] * 30)}, strict).flagged
    assert check_concentration({}).status == "n/a"
