"""The ranking check without a band: the Pearson correlation of the scores after removing each group's mean
(rlrm.parity.compare.group_pearson), and how the verdict reads it. Expected values derived in the comments."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlrm.parity.compare import (
    Tolerances,
    compare,
    group_deviations,
    group_pearson,
    group_spread,
    score_reasons,
    verdict,
)

GROUPS = np.repeat(np.arange(16), 4)  # 16 groups of 4 responses, k = 0..3 in each
K = np.tile(np.arange(4), 16)


def test_group_deviations_remove_each_group_mean_and_keep_flat_groups_exactly_flat():
    # group a: mean 2 -> (-1, 0, 1); group b: three 0.1s, whose float mean is 0.1 + 1 ulp -> exactly 0
    dev = group_deviations([1.0, 2.0, 3.0, 0.1, 0.1, 0.1], ["a", "a", "a", "b", "b", "b"])
    assert dev.tolist() == [-1.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    # RMS of (-1, 0, 1, 0, 0, 0) = sqrt(2 / 6)
    assert group_spread([1.0, 2.0, 3.0, 0.1, 0.1, 0.1], ["a", "a", "a", "b", "b", "b"]) == pytest.approx(
        math.sqrt(1 / 3)
    )


def test_group_pearson_by_hand():
    ref = [0.0, 1.0, 2.0, 3.0]
    # deviations ref (-1.5, -0.5, 0.5, 1.5), test (-0.5, -1.5, 0.5, 1.5): sum of products 0.75 + 0.75 + 0.25 +
    # 2.25 = 4, each sum of squares 5 -> 0.8
    assert group_pearson([1.0, 0.0, 2.0, 3.0], ref, ["g"] * 4) == pytest.approx(0.8)
    assert group_pearson([3.0, 2.0, 1.0, 0.0], ref, ["g"] * 4) == pytest.approx(-1.0)
    # each group's offset and a common scale do not matter: GRPO's advantages do not see them
    test = 2.0 * np.asarray(ref * 2) + np.repeat([-10.0, 7.0], 4)
    assert group_pearson(test, ref * 2, ["a"] * 4 + ["b"] * 4) == pytest.approx(1.0)
    # a side that is flat in every group: no correlation
    assert math.isnan(group_pearson([5.0] * 4, ref, ["g"] * 4))


def test_a_reversed_ranking_inside_the_band_fails_naming_what_disagreed():
    # The tester's case: logits around -10, B ranks every group in the opposite order of A. The band,
    # 2^-5 + 2^-3 * max(|A|, RMS 9.4) ~ 1.2 per sample, is wider than a whole group (-10 ... -8.8), so every
    # sample is within it, every pair is tied (Spearman n/a) and no flip is resolved.
    a = -10 + 0.4 * K
    b = -10 + 0.4 * (3 - K)
    tol = Tolerances()
    s = compare(b, a, GROUPS, tol).summary
    assert s["outside_tolerance"] == 0 and s["rank_flip_groups"] == 0 and math.isnan(s["spearman"])
    assert s["rank_flip_groups_strict"] == 16 and s["adv_sign_agreement"] == 0.0
    assert s["constant_groups"] == 16 and s["constant_groups_strict"] == 0  # tied within the band, not constant
    assert s["group_pearson"] == pytest.approx(-1.0)
    passed, reasons = verdict(s, tol)
    assert not passed
    assert reasons == [
        "within-group Pearson -1.0000 below --min-group-pearson 0.9: legacy orders the responses of a group "
        "otherwise than loop (an oppositely ordered pair in 16 of 16 groups, GRPO advantage signs equal on 0.0% "
        "of samples)"
    ]
    # `parity reward` names its sides
    assert score_reasons(s, tol, reference="A", test="B")[0].startswith(
        "within-group Pearson -1.0000 below --min-group-pearson 0.9: B orders the responses of a group otherwise than A"
    )
    # the threshold is an option: -1 lets even a reversal through
    lax = Tolerances(min_group_pearson=-1.0)
    assert verdict(compare(b, a, GROUPS, lax).summary, lax) == (True, [])


def test_a_swapped_pair_in_every_group_fails_and_rounding_noise_passes():
    a = -10 + 0.4 * K
    swapped = -10 + 0.4 * np.where(K < 2, 1 - K, K)  # the two lowest of each group swapped: 0.8 (by hand above)
    s = compare(swapped, a, GROUPS).summary
    assert s["group_pearson"] == pytest.approx(0.8) and not verdict(s, Tolerances())[0]
    # bf16-sized rounding on the same offset scores: 0.02 per sample (bf16 vs fp32 on the tiny DisRM moved
    # the median sample by about 0.02); the deviations' RMS is 0.45, so the correlation stays near
    # 1 / sqrt(1 + (0.02 / 0.45)^2) = 0.999
    noisy = a + np.random.default_rng(0).normal(scale=0.02, size=len(a))
    s = compare(noisy, a, GROUPS).summary
    assert s["group_pearson"] > 0.99 and verdict(s, Tolerances()) == (True, [])


def test_identical_responses_spread_by_rounding_alone_are_not_judged():
    # every group 4 identical responses: exactly equal in one path, up to 1e-6 apart in the other (batch
    # padding). Both deviations' RMS are at most atol, so there is no ranking to compare, whatever the
    # correlation of the rounding says.
    loop = np.repeat(np.linspace(-2.0, 2.0, 16), 4)
    legacy = loop + np.random.default_rng(1).uniform(-1e-6, 1e-6, size=len(loop))
    s = compare(legacy, loop, GROUPS).summary
    assert math.isnan(s["group_pearson"]) and s["group_spread_loop"] == 0.0 and s["group_spread_legacy"] < 1e-6
    assert verdict(s, Tolerances()) == (True, [])


def test_an_undefined_correlation_cannot_make_a_fail_pass():
    # A gives every response of a group the same score, B ranks them: B's GRPO advantages are +-1.16, A's 0.
    # Every sample is within A's band (B moves them by at most 1.2 < 1.28) and Spearman is n/a, yet it fails.
    a = np.full(64, -10.0)
    b = -10 + 0.4 * K
    s = compare(b, a, GROUPS).summary
    assert s["outside_tolerance"] == 0 and math.isnan(s["spearman"]) and math.isnan(s["group_pearson"])
    passed, reasons = verdict(s, Tolerances())
    assert not passed
    assert reasons == [
        "within-group Pearson undefined: loop gives every response of a group the same score, legacy does not "
        "(RMS deviation from the group means 0.447, above atol 0.03125)"
    ]
    # and another reason still fails when the correlation is undefined: a non-finite score
    b[0] = math.nan
    passed, reasons = verdict(compare(b, a, GROUPS).summary, Tolerances())
    assert not passed and "non-finite" in reasons[0]
