"""Training-curve figures: one labelled line per run, bands, smoothing, x-axes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlrm.report.curves import curve_figure
from rlrm.report.folders import load_folder


def labelled(ax):
    return [line for line in ax.get_lines() if not line.get_label().startswith("_")]


def _with_varying_band(folder, out):
    """A copy of a run folder whose score min/max move with the step (a reward that is not binary)."""
    out.mkdir()
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        if "critic/score/mean" in row:
            row["critic/score/min"] = row["critic/score/mean"] - 0.01 * row["step"]
            row["critic/score/max"] = row["critic/score/mean"] + 0.02 * row["step"]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "config.yaml").write_text((folder / "config.yaml").read_text())
    return out


def test_runs_overlaid_with_band_and_legend(folders, notes, tmp_path):
    runs = [load_folder(_with_varying_band(folders["a"], tmp_path / "a"), notes), load_folder(folders["b"], notes)]
    fig = curve_figure(runs, "critic/score/mean")
    ax = fig.axes[0]
    assert [line.get_label() for line in labelled(ax)] == ["a", "b"]
    # a's band varies: drawn; b's reward is binary (min 0, max 1 at every step): a band filling 0..1 says nothing
    assert len(ax.collections) == 1
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


def test_steps_are_whole_numbers_on_the_axis(notes, tmp_path):
    from rlrm.report.synthetic import write_run

    ax = curve_figure([load_folder(write_run(tmp_path / "short", steps=3), notes)], "critic/score/mean").axes[0]
    ax.figure.canvas.draw()
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_float_noise_is_drawn_flat_with_a_note(folders, notes, tmp_path):
    """On-policy `actor/ppo_kl` is ~1e-8: a fixed +-1e-3 axis and a note, not noise blown up to fill the figure."""
    out = tmp_path / "noise"
    out.mkdir()
    rows = [json.loads(line) for line in (folders["a"] / "metrics.jsonl").read_text().splitlines()]
    for i, row in enumerate(rows):
        row["actor/ppo_kl"] = (-1) ** i * 3e-8
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "config.yaml").write_text((folders["a"] / "config.yaml").read_text())
    ax = curve_figure([load_folder(out, notes)], "actor/ppo_kl").axes[0]
    assert ax.get_ylim() == (-1e-3, 1e-3)
    assert any("float noise" in t.get_text() for t in ax.texts)
    real = curve_figure([load_folder(folders["a"], notes)], "actor/entropy").axes[0]
    assert not real.texts and real.get_ylim() != (-1e-3, 1e-3)
