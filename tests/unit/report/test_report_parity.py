"""Parity figures: rank flips by hand, scatter with y = x, flip bars, training curves and their difference."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rlrm.report import parity
from rlrm.report.folders import load_folder


def test_group_flips_by_hand():
    scores = pd.DataFrame(
        {
            "group_id": [0, 0, 0, 1, 1, 1],
            # group 0: legacy order a < b < c, loop a < c < b -> pair (b, c) flips; best differs (c vs b)
            # group 1: same order, shifted -> no flips; ties in legacy (2, 2) are not flips
            "legacy_score": [0.1, 0.5, 0.9, 2.0, 2.0, 3.0],
            "loop_score": [0.1, 0.95, 0.9, 2.1, 2.5, 3.1],
        }
    )
    flips = parity.group_flips(scores)
    assert flips["flips"].tolist() == [1, 0]
    assert flips["pairs"].tolist() == [3, 3]
    assert flips["top1_agree"].tolist() == [False, True]
    assert parity.flip_counts(flips).tolist() == [1, 1]  # one group with 0 flips, one with 1


def test_scatter_has_identity_line(folders, notes):
    data = load_folder(folders["parity"], notes)
    fig = parity.scatter_figure(data.scores)
    assert len(fig.axes) == 2  # scores and advantages
    ax = fig.axes[0]
    identity = next(line for line in ax.get_lines() if line.get_label() == "y = x")
    np.testing.assert_allclose(identity.get_xdata(), identity.get_ydata())
    assert len(ax.collections[0].get_offsets()) == len(data.scores) == 48


def test_rank_flip_bars_equal_counts(folders, notes):
    data = load_folder(folders["parity"], notes)
    flips = parity.group_flips(data.scores)
    ax = parity.rank_flip_figure(flips).axes[0]
    got = [p.get_height() for p in ax.containers[0].patches]
    expected = [int((flips["flips"] == k).sum()) for k in range(int(flips["flips"].max()) + 1)]
    assert got == expected and sum(got) == 12
    assert flips["flips"].sum() > 0  # the synthetic noise does flip some pairs


def test_residual_histogram_counts_every_sample(folders, notes):
    data = load_folder(folders["parity"], notes)
    ax = parity.residual_figure(data.scores).axes[0]
    assert sum(p.get_height() for p in ax.patches) == 48


def test_training_curves_with_difference(folders, notes):
    data = load_folder(folders["parity"], notes)
    fig = parity.train_figure(data.train)
    top, bottom = fig.axes[0], fig.axes[len(fig.axes) // 2]
    assert [line.get_label() for line in top.get_lines()] == ["legacy", "reward loop"]
    legacy, loop = (line.get_ydata() for line in top.get_lines())
    diff = next(line for line in bottom.get_lines() if line.get_label() == "loop - legacy")
    np.testing.assert_allclose(diff.get_ydata(), np.asarray(loop) - np.asarray(legacy))


def test_missing_scores_skip(notes):
    with pytest.raises(parity.FigureSkipped, match="scores.parquet"):
        parity.scatter_figure(None)
    with pytest.raises(parity.FigureSkipped, match="both"):
        parity.train_figure({})


def test_summary_stats_flatten_nested_stats():
    summary = {
        "verdict": "fail",
        "reasons": ["2 groups flip their ranking"],
        "legacy_dtype": "bfloat16",
        "stats": {"abs_diff_max": 0.08, "spearman": 0.995, "rank_flip_groups": 2},
        "tolerances": {"atol": 0.03125},
        "legacy": {"dtype": "bfloat16", "device": "cpu"},
    }
    rows = parity.summary_stats(summary)
    assert rows[:6] == [
        ("verdict", "fail"),
        ("reasons", "2 groups flip their ranking"),
        ("legacy_dtype", "bfloat16"),
        ("abs_diff_max", 0.08),
        ("spearman", 0.995),
        ("rank_flip_groups", 2),
    ]
    assert ("tolerances.atol", 0.03125) in rows and ("legacy.device", "cpu") in rows


def test_rank_flip_bars_are_coloured_by_verdict_and_labelled_with_their_counts():
    from matplotlib.colors import to_rgba

    # two groups of 3: group 0 orders (b, c) the other way (1 flip), group 1 agrees (0 flips)
    scores = pd.DataFrame(
        {
            "group_id": [0, 0, 0, 1, 1, 1],
            "legacy_score": [0.1, 0.5, 0.9, 1, 2, 3],
            "loop_score": [0.1, 0.95, 0.9, 1, 2, 3],
        }
    )
    flips = parity.group_flips(scores)
    passed = parity.rank_flip_figure(flips, "pass").axes[0]
    failed = parity.rank_flip_figure(flips, "fail").axes[0]
    for ax, flipped in ((passed, "0.6"), (failed, parity.FAIL_COLOR)):
        zero, one = ax.containers[0].patches
        assert zero.get_facecolor() == to_rgba(parity.PASS_COLOR)  # no flip is never drawn as an alarm
        assert one.get_facecolor() == to_rgba(flipped)  # red only when the verdict failed
        assert [t.get_text() for t in ax.texts] == ["1", "1"]  # each bar says its count
    assert "verdict PASS" in passed.get_title() and "verdict FAIL" in failed.get_title()
    none = parity.group_flips(scores[scores["group_id"] == 1])
    only = parity.rank_flip_figure(none, "pass").axes[0].containers[0].patches
    assert len(only) == 1 and only[0].get_facecolor() == to_rgba(parity.PASS_COLOR)
