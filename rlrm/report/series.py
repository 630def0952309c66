"""Pure helpers for curves: EMA smoothing, the x-axis of a run, metric globs and shared metrics.

ema([0.0, 1.0], 0.5)            # [0.0, 0.667]: debiased, as TensorBoard's smoothing slider
x_values(run.metrics, "samples") # cumulative batch/num_samples
"""

from __future__ import annotations

import difflib
import fnmatch

from rlrm.errors import ConfigError

X_AXES = {"step": "step", "time": "wall time (s)", "samples": "samples"}
X_COLUMNS = {"step": "step", "time": "perf/wall_s", "samples": "batch/num_samples"}


def ema(values, smooth: float):
    """Debiased exponential moving average: s_t = smooth*s_{t-1} + (1-smooth)*x_t, / (1 - smooth^t).

    NaNs are skipped (they neither update the average nor get a value). `smooth` = 0 returns the
    input unchanged. Equivalent to pandas' `ewm(alpha=1 - smooth, adjust=True)`.
    """
    import numpy as np
    import pandas as pd

    series = pd.Series(values, dtype=float)
    if smooth <= 0:
        return series.to_numpy()
    out = series.ewm(alpha=1.0 - smooth, adjust=True, ignore_na=True).mean().to_numpy(copy=True)
    out[np.isnan(series.to_numpy())] = np.nan
    return out


def x_values(metrics, x: str):
    """The x coordinate of each metrics row for axis `x` (step, time or samples)."""
    import numpy as np

    if x == "step":
        return metrics["step"].to_numpy(dtype=float)
    column = X_COLUMNS[x]
    values = metrics[column].to_numpy(dtype=float)
    if x == "samples":
        return np.cumsum(np.nan_to_num(values))
    # A val-only row (step 0, before training) has no wall time: it happened at the start, or at
    # the time of the row before it.
    import pandas as pd

    wall = pd.Series(values).ffill().fillna(0.0).to_numpy(copy=True)
    # runs resumed before 2026-11-29 started each session's perf/wall_s at 0: sessions end to end, as rlrm writes now
    drops = np.flatnonzero(np.diff(wall) < 0) + 1
    for i in drops:
        wall[i:] += wall[i - 1]
    return wall


def check_x_axis(runs: list, x: str) -> None:
    """ConfigError unless every run has the column that axis `x` needs."""
    if x not in X_AXES:
        raise ConfigError(f"--x must be one of {', '.join(X_AXES)}, not {x!r}")
    column = X_COLUMNS[x]
    lacking = [run.name for run in runs if not has_metric(run.metrics, column)]
    if lacking:
        raise ConfigError(f"--x {x} needs {column}, which {', '.join(lacking)} lack(s); use --x step")


def has_metric(metrics, key: str) -> bool:
    """True if `key` is a column with at least one finite value."""
    return key in metrics.columns and bool(metrics[key].notna().any())


def available_metrics(runs: list) -> list[str]:
    """Every metric with data in at least one run, sorted."""
    names: set[str] = set()
    for run in runs:
        names.update(col for col in run.metrics.columns if col != "step" and has_metric(run.metrics, col))
    return sorted(names)


def split_globs(globs: list[str]) -> list[str]:
    """`--metrics 'a/*,b' --metrics c` -> ['a/*', 'b', 'c']."""
    return [part.strip() for item in globs for part in item.split(",") if part.strip()]


def match_metrics(globs: list[str], names: list[str]) -> list[str]:
    """Names matched by any glob, in the order of `names`; ConfigError for a glob matching nothing."""
    matched: list[str] = []
    for pattern in globs:
        hits = [name for name in names if fnmatch.fnmatchcase(name, pattern)]
        if not hits:
            close = difflib.get_close_matches(pattern.strip("*"), names, n=5, cutoff=0.4)
            hint = f"; close names: {', '.join(close)}" if close else f"; metrics look like {', '.join(names[:5])}"
            raise ConfigError(f"--metrics {pattern!r} matches no metric{hint}")
        matched.extend(hit for hit in hits if hit not in matched)
    return [name for name in names if name in matched]


def shared(runs: list, keys: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """Split `keys` into those every run has and, for the rest, the runs that lack them."""
    kept, left_out = [], {}
    for key in keys:
        lacking = [run.name for run in runs if not has_metric(run.metrics, key)]
        if lacking:
            left_out[key] = lacking
        else:
            kept.append(key)
    return kept, left_out


def decimate(xs, ys, low=None, high=None, max_points: int = 2000):
    """Fewer points that draw the same picture: per bucket of consecutive points, the min and max of
    `ys` (so spikes survive), and the bucket's min of `low` / max of `high` for a band; the first and last
    points always (the line starts and ends where the run did).

    A figure is ~800 pixels wide, so 10,000 points per line only cost render time. Returns
    (xs, ys, low, high) as arrays; inputs at or under `max_points` come back unchanged.
    """
    import warnings

    import numpy as np

    n = len(xs)
    if n <= max_points:
        return xs, ys, low, high
    size = -(-n // ((max_points - 2) // 2))  # ceil; the first and last points are kept besides the buckets'
    buckets = -(-n // size)  # every bucket but the last is full, the last holds >= 1 point

    def grid(values):  # [buckets, size], padded with NaN
        return np.concatenate([np.asarray(values, dtype=float), np.full(size * buckets - n, np.nan)]).reshape(
            buckets, size
        )

    offsets = np.arange(buckets) * size
    ys_grid = grid(ys)
    lowest = np.argmin(np.where(np.isnan(ys_grid), np.inf, ys_grid), axis=1)  # a bucket all NaN: its first point
    highest = np.argmax(np.where(np.isnan(ys_grid), -np.inf, ys_grid), axis=1)
    keep = np.concatenate([[0, n - 1], lowest + offsets, highest + offsets])
    keep = np.unique(keep[keep < n])
    bucket = keep // size
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a bucket of NaN band values stays NaN
        low = None if low is None else np.nanmin(grid(low), axis=1)[bucket]
        high = None if high is None else np.nanmax(grid(high), axis=1)[bucket]
    return np.asarray(xs)[keep], np.asarray(ys)[keep], low, high
