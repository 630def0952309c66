"""Training-curve figures: one labelled line per run, bands, smoothing, x-axes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlrm.report.curves import curve_figure
from rlrm.report.folders import load_folder


def labelled(ax):
    return [line for line in ax.get_lines() if not line.get_label().startswith("_")]


def test_runs_overlaid_with_band_and_legend(folders, notes):
    runs = [load_folder(folders["a"], notes), load_folder(folders["b"], notes)]
    fig = curve_figure(runs, "critic/score/mean")
    ax = fig.axes[0]
    assert [line.get_label() for line in labelled(ax)] == ["a", "b"]
    assert len(ax.collections) == 2  # one min-max band per run
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    line_a = labelled(ax)[0]
    lines = (folders["a"] / "metrics.jsonl").read_text().splitlines()[1:]  # after the val-only step 0
    expected = [json.loads(line)["critic/score/mean"] for line in lines]
    np.testing.assert_allclose(line_a.get_ydata(), expected)
    np.testing.assert_allclose(line_a.get_xdata(), np.arange(1, 13))


def test_smoothing_keeps_the_raw_line_faint(folders, notes):
    run = load_folder(folders["a"], notes)
    fig = curve_figure([run], "actor/entropy", smooth=0.9)
    ax = fig.axes[0]
    assert len(ax.get_lines()) == 2 and [line.get_label() for line in labelled(ax)] == ["a"]
    raw, smooth = ax.get_lines()
    assert raw.get_alpha() < 1
    np.testing.assert_allclose(raw.get_ydata(), run.metrics["actor/entropy"].dropna())
    assert np.ptp(smooth.get_ydata()) < np.ptp(raw.get_ydata())  # a falling line lags when smoothed


@pytest.mark.parametrize("x, last", [("samples", 12 * 256), ("time", None)])
def test_x_axes(folders, notes, x, last):
    run = load_folder(folders["a"], notes)
    line = labelled(curve_figure([run], "critic/score/mean", x=x).axes[0])[0]
    assert line.get_xdata()[-1] == pytest.approx(last or run.metrics["perf/wall_s"].iloc[-1])


def test_sparse_validation_is_drawn_with_markers(folders, notes):
    run = load_folder(folders["a"], notes)
    line = labelled(curve_figure([run], "val/accuracy").axes[0])[0]
    assert list(line.get_xdata()) == [0, 10] and line.get_marker() == "o"
