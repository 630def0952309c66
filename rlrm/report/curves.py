"""Training curves: one figure per metric, every run overlaid, legend named after each run.

    fig = curve_figure(runs, "critic/score/mean", x="step", smooth=0.9)

A metric `X/mean` with `X/min` and `X/max` beside it is drawn with a min-max band where the band says
something: a band of constant width (a binary reward's 0..1 at every step) is left out. Steps are
whole numbers on the axis. A metric whose values all sit within float noise of 0 (an on-policy
`actor/ppo_kl` of ~1e-8) is drawn on a fixed +-1e-3 axis with a note, not blown up to fill it. With smoothing
the raw values stay visible as a faint line (unlabelled) under the smoothed one. Long series are
decimated (min and max per bucket of points) before drawing; smoothing uses every point.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlrm.report.figures import color, new_figure
from rlrm.report.series import X_AXES, decimate, ema, has_metric, x_values


@dataclass(frozen=True)
class CurveSpec:
    """A default figure: its file name, title and the metric(s) it may show (first shared one wins)."""

    name: str
    title: str
    keys: tuple[str, ...]


DEFAULT_CURVES = (
    CurveSpec("reward", "Reward (mean, with the min-max band where it varies)", ("critic/score/mean",)),
    CurveSpec("val_accuracy", "Validation accuracy", ("val/accuracy",)),
    CurveSpec("response_length", "Response length (tokens)", ("response_length/mean",)),
    CurveSpec("kl", "KL", ("actor/kl_loss", "actor/ppo_kl")),
    CurveSpec("entropy", "Entropy", ("actor/entropy",)),
    CurveSpec("grad_norm", "Gradient norm", ("actor/grad_norm",)),
    CurveSpec("throughput", "Throughput (tokens/s)", ("perf/throughput",)),
)
COMPONENT_CURVES = "reward/component/*/mean"  # drawn too, one figure per reward component a run logs
FLOAT_NOISE = 1e-6  # |value| below this everywhere: nothing but rounding (on-policy KL is ~1e-8)


def curve_figure(runs: list, key: str, x: str = "step", smooth: float = 0.0, title: str | None = None):
    """One metric over `x` for every run; returns the Figure (one labelled line per run)."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = new_figure()
    band = _band_keys(key)
    largest = [_plot_run(ax, run, key, band, x, smooth, color(i)) for i, run in enumerate(runs)]
    largest = [v for v in largest if v == v]  # runs with nothing to draw give NaN
    ax.set_title(title or key)
    ax.set_xlabel(X_AXES[x])
    ax.set_ylabel(key)
    if x in ("step", "samples"):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if largest and max(largest) < FLOAT_NOISE:
        ax.set_ylim(-1e-3, 1e-3)
        ax.text(
            0.01,
            0.97,
            f"every value is 0 up to float noise (|x| < {FLOAT_NOISE:g})",
            transform=ax.transAxes,
            va="top",
            fontsize="small",
            color="0.35",
        )
    if len(runs) > 1:
        # outside the axes: loc="best" scans every point (slow for long runs) and hides no data here
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return fig


def _plot_run(ax, run, key: str, band: tuple[str, str] | None, x: str, smooth: float, line_color: str) -> float:
    """Draw one run's line (and band); returns the largest |value| drawn (NaN when it has none)."""
    import numpy as np

    metrics = run.metrics
    xs = x_values(metrics, x)
    ys = metrics[key].to_numpy(dtype=float)
    keep = ~np.isnan(ys) & ~np.isnan(xs)
    xs, ys = xs[keep], ys[keep]
    marker = "o" if len(ys) <= 30 else None  # sparse series (validation) read better as points
    low = high = None
    if band and all(has_metric(metrics, k) for k in band):
        low, high = (metrics[k].to_numpy(dtype=float)[keep] for k in band)
        if len(low) and np.ptp(high - low) == 0:  # the same width at every step (0..1 of a binary reward): says nothing
            low = high = None
    if smooth > 0:
        raw_x, raw_y, _, _ = decimate(xs, ys)
        ax.plot(raw_x, raw_y, color=line_color, alpha=0.25, linewidth=0.8, label="_raw")
        ys = ema(ys, smooth)
    xs, ys, low, high = decimate(xs, ys, low, high)
    if low is not None:
        ax.fill_between(xs, low, high, color=line_color, alpha=0.15, linewidth=0, label=f"_{run.name} min-max")
    ax.plot(xs, ys, color=line_color, linewidth=1.5, marker=marker, markersize=3, label=run.name)
    return float(np.max(np.abs(ys))) if len(ys) else float("nan")


def _band_keys(key: str) -> tuple[str, str] | None:
    if not key.endswith("/mean"):
        return None
    stem = key[: -len("mean")]
    return stem + "min", stem + "max"


def file_name(key: str) -> str:
    """A file-name-safe figure name for a metric key: 'actor/pg_loss' -> 'curve_actor-pg_loss'."""
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in key)
    return f"curve_{safe}"
