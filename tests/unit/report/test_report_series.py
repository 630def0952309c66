"""Pure curve helpers: EMA, decimation, x-axes, metric globs, folder loading tolerance."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlrm.errors import ConfigError, RunFolderError
from rlrm.report.folders import folder_kind, load_folder, metrics_frame
from rlrm.report.series import decimate, ema, match_metrics, shared, split_globs, x_values


def test_ema_is_debiased_and_skips_nan():
    # smooth 0.5: s1 = 0.5*0 + 0.5*0 = 0 -> /(1-0.5) = 0;  s2 = 0.5*0 + 0.5*1 = 0.5 -> /(1-0.25) = 2/3
    # NaN neither moves the average nor gets a value; the next point continues from 2/3:
    # s3 = 0.5*0.5 + 0.5*1 = 0.75 -> /(1-0.125) = 6/7
    out = ema([0.0, 1.0, np.nan, 1.0], 0.5)
    assert out[0] == pytest.approx(0.0)
    assert out[1] == pytest.approx(2 / 3)
    assert np.isnan(out[2])
    assert out[3] == pytest.approx(6 / 7)
    assert list(ema([3.0, 5.0], 0.0)) == [3.0, 5.0]


def test_decimate_keeps_extremes():
    xs = np.arange(10_000, dtype=float)
    ys = np.zeros(10_000)
    ys[1234], ys[8765] = 9.0, -7.0  # single-point spikes must survive
    low, high = ys - 1, ys + 1
    dx, dy, dlow, dhigh = decimate(xs, ys, low, high, max_points=200)
    assert len(dx) <= 200
    assert dy.max() == 9.0 and dy.min() == -7.0
    assert dhigh.max() == 10.0 and dlow.min() == -8.0
    assert np.all(np.diff(dx) > 0)
    same = decimate(xs[:50], ys[:50])
    assert len(same[0]) == 50


@pytest.mark.parametrize("n", [2001, 2500, 3001])
def test_decimate_just_over_max_points_keeps_to_it(n):
    # before: buckets = 1000 of ceil(n/1000) points, so the last buckets held only padding and
    # np.nanargmin raised "All-NaN slice encountered": `rlrm report` of a 2,001-step run crashed
    xs = np.arange(n, dtype=float)
    ys = np.sin(xs)
    dx, dy, _, _ = decimate(xs, ys)
    assert len(dx) <= 2000 and dy.max() == ys.max() and dy.min() == ys.min()


def test_decimate_keeps_the_first_and_last_point_and_survives_a_stretch_of_nan():
    rng = np.random.default_rng(0)
    xs = np.arange(1, 10_001, dtype=float)
    ys = rng.normal(size=10_000)
    ys[3000:3500] = np.nan  # a metric missing for a while: whole buckets of NaN
    dx, dy, _, _ = decimate(xs, ys)
    assert (dx[0], dx[-1], dy[-1]) == (1.0, 10_000.0, ys[-1])  # before: the line began at step 7
    assert len(dx) <= 2000 and np.nanmax(dy) == np.nanmax(ys)


def test_x_values_samples_and_time():
    frame = metrics_frame(
        [
            {"step": 0, "val/accuracy": 0.1},
            {"step": 1, "batch/num_samples": 8, "perf/wall_s": 2.0},
            {"step": 2, "batch/num_samples": 6, "perf/wall_s": 3.5},
        ]
    )
    assert list(x_values(frame, "samples")) == [0.0, 8.0, 14.0]  # cumulative; the val-only row adds nothing
    assert list(x_values(frame, "time")) == [0.0, 2.0, 3.5]
    assert list(x_values(frame, "step")) == [0.0, 1.0, 2.0]


def test_x_time_of_a_run_resumed_with_the_old_wall_clock_goes_forward():
    # runs resumed before perf/wall_s went on across sessions restarted it at 0: [10, 20 | 10, 20]
    rows = [{"step": k, "perf/wall_s": w} for k, w in ((1, 10.0), (2, 20.0), (3, 10.0), (4, 20.0))]
    assert list(x_values(metrics_frame(rows), "time")) == [10.0, 20.0, 30.0, 40.0]


def test_glob_matching_and_close_names():
    names = ["actor/entropy", "actor/kl_loss", "actor/ppo_kl", "critic/score/mean"]
    assert match_metrics(split_globs(["actor/*kl*", "critic/score/mean"]), names) == [
        "actor/kl_loss",
        "actor/ppo_kl",
        "critic/score/mean",
    ]
    with pytest.raises(ConfigError, match="close names: actor/kl_loss"):
        match_metrics(["actor/kl_los"], names)


def test_shared_metrics_name_the_runs_that_lack_them(tmp_path, notes):
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    (tmp_path / "x" / "metrics.jsonl").write_text('{"step": 1, "a": 1, "b": 2}\n')
    (tmp_path / "y" / "metrics.jsonl").write_text('{"step": 1, "a": 3}\n')
    runs = [load_folder(tmp_path / "x", notes), load_folder(tmp_path / "y", notes)]
    assert shared(runs, ["a", "b"]) == (["a"], {"b": ["y"]})


def test_truncated_metrics_use_complete_rows(tmp_path, notes):
    rows = [{"step": k, "critic/score/mean": k / 10} for k in range(1, 4)]
    text = "".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "critic/sc'
    (tmp_path / "metrics.jsonl").write_text(text)
    run = load_folder(tmp_path, notes)
    assert run.last_step == 3 and run.skipped_rows == 1
    assert list(run.metrics["critic/score/mean"]) == [0.1, 0.2, 0.3]
    assert any("skipped 1 incomplete line" in n and "3 complete row" in n for n in notes)


def test_folder_kinds(folders, tmp_path, notes):
    assert [folder_kind(folders[k]) for k in ("a", "bench", "parity")] == ["run", "bench", "parity"]
    with pytest.raises(RunFolderError, match="expected metrics.jsonl"):
        load_folder(tmp_path, notes)
    with pytest.raises(RunFolderError, match="does not exist"):
        load_folder(tmp_path / "nope", notes)
