"""Agreement of two reward contracts' verdicts (rlrm/parity/agreement.py), against values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlrm.parity.agreement import binary_agreement, verdict_agreement


def test_kappa_and_confusion_of_two_yes_no_judges():
    a = [1, 1, 0, 0, 1, 0, 1, 1, 0, 0]
    b = [1, 0, 0, 0, 1, 0, 1, 1, 1, 0]
    got = verdict_agreement(a, b)
    # a high & b high: samples 0, 4, 6, 7 -> 4; a low & b low: 2, 3, 5, 9 -> 4; a high & b low: 1; a low & b high: 8
    # agreement 8/10; P(a high) = P(b high) = 0.5, chance = 0.5 * 0.5 + 0.5 * 0.5 = 0.5; kappa = (0.8 - 0.5) / 0.5
    assert got["compared"] == 10 and got["exact"] == pytest.approx(0.8)
    binary = got["binary"]
    assert binary["confusion"] == [[4, 1], [1, 4]]
    assert binary["rate"] == pytest.approx(0.8) and binary["kappa"] == pytest.approx(0.6)
    assert binary["levels"] == [0.0, 1.0]


def test_unequal_yes_rates_lower_kappa_below_the_agreement():
    # a says yes 3 times in 4, b once: they agree on samples 0 and 3 (rate 0.5)
    # chance = 0.75 * 0.25 + 0.25 * 0.75 = 0.375; kappa = (0.5 - 0.375) / 0.625 = 0.2
    got = binary_agreement([True, True, True, False], [True, False, False, False], [0.0, 1.0])
    assert got["confusion"] == [[1, 0], [2, 1]]
    assert got["kappa"] == pytest.approx(0.2) and got["a_high_rate"] == 0.75 and got["b_high_rate"] == 0.25


def test_opposite_judges_have_kappa_minus_one():
    got = verdict_agreement([0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0])["binary"]
    assert got["rate"] == 0.0 and got["kappa"] == pytest.approx(-1.0)


def test_failed_samples_are_left_out_not_counted_as_disagreement():
    got = verdict_agreement([1.0, math.nan, 0.0, 1.0], [1.0, 0.0, math.nan, 1.0])
    assert got["compared"] == 2 and got["exact"] == 1.0
    assert got["binary"]["confusion"] == [[0, 0], [0, 2]]


def test_one_verdict_everywhere_agrees_but_kappa_is_undefined():
    got = verdict_agreement([1.0, 1.0, 1.0], [1.0, 1.0, 1.0])
    assert got["binary"]["rate"] == 1.0 and math.isnan(got["binary"]["kappa"])
    assert got["binary"]["levels"] == [1.0]


def test_graded_scores_have_no_binary_statistics_but_exact_agreement():
    got = verdict_agreement([0.0, 0.5, 1.0, 0.5], [0.0, 0.5, 1.0, 1.0])
    assert got["binary"] is None and got["exact"] == pytest.approx(0.75)
    # two levels that are not 0 and 1 (a judge whose max_score was halved on one side only) still count as binary
    assert verdict_agreement([2.0, 0.0], [2.0, 2.0])["binary"]["confusion"] == [[0, 1], [0, 1]]


def test_nothing_scored_by_both():
    got = verdict_agreement(np.array([math.nan]), np.array([1.0]))
    assert got["compared"] == 0 and math.isnan(got["exact"]) and got["binary"] is None
