"""Parity statistics on hand-made score vectors; expected values derived in the comments."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlrm.engine.algorithms import grpo_advantages
from rlrm.parity.compare import (
    Tolerances,
    average_ranks,
    band_tied_ranks,
    compare,
    group_ranking,
    kendall_tau_b,
    pearson,
    score_bands,
    spearman,
    verdict,
)

BANDS3 = [0.01, 0.01, 0.01]  # every sample +-0.01: a pair is tied within 0.02


def test_flipped_pair_is_a_resolved_flip_and_loses_top1():
    # ref 1 < 2 < 3; test swaps the two best. Pairs: (0,1) and (0,2) concordant, (1,2) discordant
    # -> tau = (2 - 1) / 3. Test's best (index 1) scores 2 in ref, 1 below ref's best: not tied.
    g = group_ranking(test=[1.0, 3.0, 2.0], ref=[1.0, 2.0, 3.0], bands=BANDS3)
    assert g["kendall_tau"] == pytest.approx(1 / 3)
    assert g["flip"] and g["flip_strict"]
    assert not g["top1"] and not g["top1_strict"] and not g["constant"]


def test_near_tie_swap_is_only_a_strict_flip():
    # the first two differ by 0.005 < 0.02 (the pair's band): swapping them is rounding
    g = group_ranking(test=[1.005, 1.0, 2.0], ref=[1.0, 1.005, 2.0], bands=BANDS3)
    assert g["flip_strict"] and not g["flip"]
    assert g["kendall_tau"] == pytest.approx(1.0)  # the swapped pair is tied; the other two are concordant
    assert g["kendall_tau_strict"] == pytest.approx(1 / 3)  # exact tau still sees one discordant pair of three
    assert g["top1"] and g["top1_strict"]


def test_kendall_tau_b_with_ties():
    # identical tied vectors: 3 pairs, 1 tied in each -> C=2, D=0 -> 2 / sqrt(2 * 2) = 1
    assert kendall_tau_b([1, 1, 2], [1, 1, 2]) == pytest.approx(1.0)
    # a = [1,2,3] (no ties, 3 untied pairs), b = [1,1,2] (2 untied); C = 2 -> 2 / sqrt(3 * 2)
    assert kendall_tau_b([1, 2, 3], [1, 1, 2]) == pytest.approx(2 / math.sqrt(6))
    assert math.isnan(kendall_tau_b([1, 2, 3], [4, 4, 4]))


def test_constant_group_has_no_tau_keeps_top1_and_amplifies_advantages():
    # every ref score equal: tau undefined, the group counts as constant, any best is tied with the best
    g = group_ranking(test=[5.0, 5.0, 5.001], ref=[5.0, 5.0, 5.0], bands=BANDS3)
    assert math.isnan(g["kendall_tau"]) and g["constant"]
    assert g["top1"] and not g["top1_strict"] and not g["flip"] and not g["flip_strict"]
    cmp = compare([5.0, 5.0, 5.001], [5.0, 5.0, 5.0], ["g", "g", "g"], Tolerances(atol=0.01, rtol=0.0))
    # loop: std 0 -> advantages 0. legacy: deviations (-1, -1, 2)/3000, unbiased std 1/sqrt(3e6):
    # advantages (-1, -1, 2)/sqrt(3) shrunk a little by eps=1e-6 -> about (-0.577, -0.577, 1.154)
    assert np.allclose(cmp.loop_adv, 0.0)
    assert cmp.legacy_adv == pytest.approx([-0.5764, -0.5764, 1.1529], abs=2e-3)
    assert cmp.summary["adv_max_abs_diff"] == pytest.approx(1.1529, abs=2e-3)
    assert cmp.summary["adv_sign_agreement"] == 0.0  # 0 vs +-0.58: a 0.001 score change flips GRPO's sign
    assert cmp.summary["constant_groups"] == 1 and cmp.summary["outside_tolerance"] == 0


def test_rank_correlations():
    # values are their own ranks: d = (0, -1, 1, 0) -> rho = 1 - 6 * 2 / (4 * 15) = 0.8
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert pearson([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    # ties take the average rank: [1, 2.5, 2.5, 4] vs [1, 2, 3, 4] -> 4.5 / sqrt(4.5 * 5)
    assert list(average_ranks([1, 2, 2, 3])) == [1.0, 2.5, 2.5, 4.0]
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_band_is_relative_to_the_larger_of_the_score_and_the_batch_scale():
    # ref (3, 4, 0): RMS = sqrt(25 / 3) = 2.887; bands 0.1 + 0.5 * max(|r|, 2.887)
    bands = score_bands([3.0, 4.0, 0.0], atol=0.1, rtol=0.5)
    assert bands == pytest.approx([0.1 + 0.5 * 3.0, 0.1 + 0.5 * 4.0, 0.1 + 0.5 * math.sqrt(25 / 3)])


def test_compare_summarises_every_group_and_excludes_nonfinite_ones():
    groups = ["a"] * 3 + ["b"] * 3 + ["c"] * 3 + ["d"] * 2
    loop = [1.0, 2.0, 3.0, 1.0, 1.005, 2.0, 5.0, 5.0, 5.0, 1.0, 2.0]
    legacy = [1.0, 3.0, 2.0, 1.005, 1.0, 2.0, 5.0, 5.0, 5.001, 1.0, float("nan")]
    cmp = compare(legacy, loop, groups, Tolerances(atol=0.01, rtol=0.0))
    s = cmp.summary
    assert (s["samples"], s["groups"], s["groups_with_nonfinite"]) == (11, 4, 1)
    assert (s["nonfinite_legacy"], s["nonfinite_loop"]) == (1, 0)
    assert s["outside_tolerance"] == 2  # group a's swapped 2 and 3; the NaN is counted apart
    assert s["abs_diff_max"] == pytest.approx(1.0) and s["abs_diff_argmax"] in (1, 2)
    assert (s["rank_flip_groups"], s["rank_flip_groups_strict"], s["constant_groups"]) == (1, 2, 1)
    assert s["top1_agreement"] == pytest.approx(2 / 3) and s["top1_agreement_strict"] == pytest.approx(1 / 3)
    assert math.isnan(cmp.abs_diff[10]) and math.isnan(cmp.legacy_adv[9]) and math.isnan(cmp.loop_adv[10])
    # advantages are the trainer's own maths over the clean groups
    expected = grpo_advantages(torch.tensor(loop[:9]), groups[:9]).numpy()
    assert cmp.loop_adv[:9] == pytest.approx(expected, abs=1e-6)
    passed, reasons = verdict(s, Tolerances(atol=0.01, rtol=0.0))
    assert not passed
    assert any("non-finite" in r for r in reasons) and any("flip" in r for r in reasons)
    assert any("2 of 11 samples (allowed 0)" in r for r in reasons)


def test_verdict_allows_a_small_share_of_outliers_and_checks_spearman():
    rng = np.random.default_rng(0)
    loop = rng.normal(size=200)
    groups = np.repeat(np.arange(50), 4)
    legacy = loop + rng.normal(scale=1e-3, size=200)
    tol = Tolerances()
    assert verdict(compare(legacy, loop, groups, tol).summary, tol) == (True, [])
    best = [4 * g + int(np.argmax(loop[4 * g : 4 * g + 4])) for g in range(3)]  # raised, they stay their group's best
    legacy[best[0]] += 1.0  # one outlier in 200: 1% allows 2
    assert verdict(compare(legacy, loop, groups, tol).summary, tol)[0]
    legacy[best[1:]] += 1.0
    passed, reasons = verdict(compare(legacy, loop, groups, tol).summary, tol)
    assert not passed and "3 of 200 samples (allowed 2)" in reasons[0]
    shuffled = rng.permutation(loop)  # unrelated scores
    passed, reasons = verdict(compare(shuffled, loop, groups, tol).summary, tol)
    assert not passed and any("Spearman" in r for r in reasons)
    # A band wide enough to hold every difference makes every pair a tie: the ranking says nothing
    # (Spearman undefined) and only the band decides.
    wide = Tolerances(atol=10.0)
    summary = compare(shuffled, loop, groups, wide).summary
    assert math.isnan(summary["spearman"]) and summary["spearman_strict"] < 0.2 and verdict(summary, wide) == (True, [])


def test_band_tied_ranks_are_average_ranks_with_ties_within_the_band():
    x = [1.0, 1.005, 2.0, 3.0]
    # bands 0: exact ties only -> the usual average ranks
    assert list(band_tied_ranks(x, x, x, [0.0] * 4)) == list(average_ranks(x)) == [1.0, 2.0, 3.0, 4.0]
    # bands 0.01: 1.0 and 1.005 are tied (0.005 <= 0.02): both 1 + 0 + 1/2
    assert list(band_tied_ranks(x, x, x, [0.01] * 4)) == [1.5, 1.5, 3.0, 4.0]
    # not transitive: 0 ~ 1 and 1 ~ 2 (gaps 0.015 <= 0.02) but 0 < 2 (0.03): ranks 1.5, 2, 2.5; mean still 2
    y = [0.0, 0.015, 0.03]
    assert list(band_tied_ranks(y, y, y, [0.01] * 3)) == [1.5, 2.0, 2.5]
    # a pair tied in either path is tied in both rankings
    assert list(band_tied_ranks([1.0, 2.0], [1.0, 2.0], [1.0, 1.001], [0.01, 0.01])) == [1.5, 1.5]


def test_identical_responses_one_ulp_apart_do_not_fail_spearman():
    # The flaky fp32-vs-fp32 check: two identical responses of a group score exactly equal in the
    # legacy path and 1 ulp apart in the served one (its dynamic batch padded them differently).
    legacy = np.array([0.070399, 0.084720, 0.084720, 0.451351, -0.242854, 0.665617], np.float32).astype(np.float64)
    loop = legacy.copy()
    loop[2] = np.nextafter(np.float32(loop[2]), np.float32(1.0))
    groups = ["a"] * 3 + ["b"] * 3
    # average ranks: legacy (2, 3.5, 3.5, 5, 1, 6), loop (2, 3, 4, 5, 1, 6): rho = 17 / sqrt(17 * 17.5)
    summary = compare(legacy, loop, groups).summary
    assert summary["spearman_strict"] == pytest.approx(17 / math.sqrt(17 * 17.5)) == pytest.approx(0.9856, abs=1e-4)
    assert summary["spearman"] == 1.0 and summary["pearson"] == pytest.approx(1.0)
    assert verdict(summary, Tolerances()) == (True, [])
