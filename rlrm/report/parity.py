"""Parity figures from a parity folder: `rlrm parity disrm`'s legacy (in-trainer) vs reward-loop scores, or
`rlrm parity reward`'s side A vs side B.

    flips = group_flips(parity.scores)        # one row per group: n, pairs, flips, top1_agree
    fig = scatter_figure(parity.scores)       # loop vs legacy (B vs A) with the y = x line

Colours follow verl's parity plots: legacy in orange, reward loop in red.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlrm.report.figures import FigureSkipped, new_figure
from rlrm.report.series import has_metric

LEGACY_COLOR, LOOP_COLOR = "tab:orange", "tab:red"
PASS_COLOR, FAIL_COLOR = "tab:green", "tab:red"
TRAIN_KEYS = ("critic/score/mean", "val/accuracy", "response_length/mean", "actor/entropy")


@dataclass(frozen=True)
class Sides:
    """The two sides of a scores.parquet: their score and advantage columns and their names in the figures.
    `x` is drawn on the x axis, `y` on the y axis; residuals are y - x."""

    x_score: str
    y_score: str
    x_adv: str
    y_adv: str
    x_name: str
    y_name: str
    x_short: str
    y_short: str


DISRM_SIDES = Sides("legacy_score", "loop_score", "legacy_adv", "loop_adv", "legacy", "reward loop", "legacy", "loop")
REWARD_SIDES = Sides("a_score", "b_score", "a_adv", "b_adv", "side A", "side B", "A", "B")


def sides_of(scores, what: str) -> Sides:
    """Which parity command wrote `scores`: `parity disrm` (legacy_score, loop_score) or `parity reward`
    (a_score, b_score). FigureSkipped, naming `what` was to be drawn, when it is neither."""
    if scores is None:
        raise FigureSkipped(f"no scores.parquet for the {what}")
    for sides in (DISRM_SIDES, REWARD_SIDES):
        if {sides.x_score, sides.y_score} <= set(scores.columns):
            return sides
    raise FigureSkipped(
        f"scores.parquet has neither legacy_score and loop_score (parity disrm) nor a_score and b_score "
        f"(parity reward) columns for the {what}"
    )


def group_flips(scores):
    """Per group: samples `n`, sample `pairs`, `flips` (pairs ordered one way by one side and the
    other way by the other; exact ties are not flips, near-ties are: this is the strict count) and
    `top1_agree` (both pick the same best sample). Non-finite scores are left out."""
    import numpy as np
    import pandas as pd

    sides = sides_of(scores, "rank flips")
    _require(scores, ("group_id",), "rank flips")
    xs = scores[sides.x_score].to_numpy(dtype=float)
    ys = scores[sides.y_score].to_numpy(dtype=float)
    rows = []
    for gid, idx in scores.groupby("group_id", sort=True).indices.items():
        a, b = xs[idx], ys[idx]
        finite = np.isfinite(a) & np.isfinite(b)
        a, b, idx = a[finite], b[finite], idx[finite]
        if not len(idx):
            continue
        # [n, n] sign agreement of every ordered pair; each unordered pair appears twice
        concord = np.sign(a[:, None] - a[None, :]) * np.sign(b[:, None] - b[None, :])
        n = len(idx)
        rows.append((gid, n, n * (n - 1) // 2, int((concord < 0).sum()) // 2, bool(np.argmax(a) == np.argmax(b))))
    return pd.DataFrame(rows, columns=["group_id", "n", "pairs", "flips", "top1_agree"])


def flip_counts(flips):
    """How many groups have 0, 1, 2, ... rank flips (every count up to the maximum, zeros kept)."""
    import numpy as np
    import pandas as pd

    counts = np.bincount(flips["flips"].to_numpy(dtype=int)) if len(flips) else np.zeros(1, dtype=int)
    return pd.Series(counts, index=pd.RangeIndex(len(counts), name="flips"), name="groups")


def scatter_figure(scores):
    """Loop score vs legacy score, or B vs A (and advantages when present), each with the y = x line."""
    sides = sides_of(scores, "score scatter")
    panels = [(sides.x_score, sides.y_score, "Score")]
    if {sides.x_adv, sides.y_adv} <= set(scores.columns):
        panels.append((sides.x_adv, sides.y_adv, "GRPO advantage"))
    fig, axes = new_figure(1, len(panels), width=5.0 * len(panels), height=4.8, squeeze=False)
    for ax, (xcol, ycol, title) in zip(axes[0], panels):
        xs, ys = scores[xcol].to_numpy(dtype=float), scores[ycol].to_numpy(dtype=float)
        ax.scatter(xs, ys, s=6, alpha=0.5, color=LOOP_COLOR, linewidths=0, rasterized=True, label="samples")
        low, high = _finite_range(xs, ys)
        ax.plot([low, high], [low, high], color="0.2", linestyle="--", linewidth=1, label="y = x")
        ax.set_xlabel(f"{sides.x_name} ({xcol})")
        ax.set_ylabel(f"{sides.y_name} ({ycol})")
        ax.set_title(title)
        ax.legend(loc="upper left", fontsize="small")
    return fig


def residual_figure(scores):
    """Histogram of loop - legacy (B - A) score per sample, with the zero line."""
    import numpy as np

    sides = sides_of(scores, "residual histogram")
    resid = (scores[sides.y_score].astype(float) - scores[sides.x_score].astype(float)).to_numpy()
    resid = resid[np.isfinite(resid)]
    fig, ax = new_figure(width=6.5)
    ax.hist(resid, bins=min(60, max(5, int(np.sqrt(max(len(resid), 1))))), color=LOOP_COLOR, alpha=0.8)
    ax.axvline(0.0, color="0.2", linestyle="--", linewidth=1)
    if len(resid):
        ax.set_title(
            f"Residual {sides.y_short} - {sides.x_short} (mean {resid.mean():.3g}, max |.| {np.abs(resid).max():.3g})"
        )
    ax.set_xlabel(f"{sides.y_short} score - {sides.x_short} score")
    ax.set_ylabel("samples")
    return fig


def rank_flip_figure(flips, verdict: str | None = None):
    """Groups by number of rank flips (bar heights are `flip_counts(flips)`, each written on its bar), top-1
    agreement and the verdict in the title.

    Colour says what a bar means, not that a bar exists: groups with no flip are green; groups with flips are red
    when the verdict failed (or is unknown), grey when it passed (the strict count: near-ties within the
    tolerance bands the verdict reads)."""
    counts = flip_counts(flips)
    passed = str(verdict).lower() == "pass"
    flipped = "0.6" if passed else FAIL_COLOR
    colours = [PASS_COLOR if k == 0 else flipped for k in counts.index]
    fig, ax = new_figure(width=6.5)
    bars = ax.bar(counts.index.to_numpy(), counts.to_numpy(), 0.7, color=colours, label="groups")
    ax.bar_label(bars, labels=[str(int(v)) for v in counts.to_numpy()], padding=2)
    ax.set_ylim(0, max(1, int(counts.max())) * 1.15)
    agree = flips["top1_agree"].mean() if len(flips) else float("nan")
    said = f"verdict {str(verdict).upper()}: " if verdict else ""
    ax.set_title(f"Rank flips per group\n{said}{len(flips)} groups, top-1 agreement {agree:.1%}")
    ax.set_xlabel("pairs ordered differently by the two sides (strict: near-ties count)")
    ax.set_ylabel("groups")
    ax.set_xticks(counts.index.to_numpy())
    return fig


SUMMARY_ORDER = (
    "verdict",
    "reasons",
    "legacy_dtype",
    "loop_dtype",
    "samples",
    "groups",
    "max_abs_diff",
    "abs_diff_max",
    "mean_abs_diff",
    "abs_diff_mean",
    "p99_abs_diff",
    "abs_diff_p99",
    "pearson",
    "spearman",
    "group_pearson",
    "kendall_tau_mean",
    "top1_agreement",
    "rank_flips",
    "rank_flip_groups",
    "rank_flip_groups_strict",
    "adv_max_abs_diff",
    "adv_sign_agreement",
)


def summary_stats(summary: dict) -> list[tuple[str, object]]:
    """summary.json as (name, value) rows: the headline statistics first, then the rest.

    A nested `stats` dict is read as top-level statistics; other nested dicts become `outer.inner`
    rows and lists of scalars one '; '-joined value.
    """
    flat: dict[str, object] = {}
    for key, value in summary.items():
        if isinstance(value, dict):
            for inner, v in value.items():
                if _scalar(v):
                    flat[inner if key == "stats" else f"{key}.{inner}"] = v
        elif isinstance(value, list) and all(_scalar(v) for v in value):
            flat[key] = "; ".join(map(str, value)) if value else "none"
        elif _scalar(value):
            flat[key] = value
    first = [k for k in SUMMARY_ORDER if k in flat]
    return [(k, flat[k]) for k in first] + [(k, v) for k, v in flat.items() if k not in first]


def _scalar(value) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def train_keys(train: dict) -> list[str]:
    """The training-curve metrics both the legacy and the loop run have."""
    runs = [run for run in (train.get("legacy"), train.get("loop")) if run is not None]
    if len(runs) < 2:
        raise FigureSkipped("training-curve parity needs both train/legacy and train/loop")
    keys = [k for k in TRAIN_KEYS if all(has_metric(run.metrics, k) for run in runs)]
    if not keys:
        raise FigureSkipped(f"train/legacy and train/loop share none of {', '.join(TRAIN_KEYS)}")
    return keys


def train_figure(train: dict):
    """Top row: legacy (orange) and loop (red) curves per metric; bottom row: loop - legacy by step."""
    import pandas as pd

    keys = train_keys(train)
    legacy, loop = train["legacy"].metrics, train["loop"].metrics
    fig, axes = new_figure(2, len(keys), width=4.5 * len(keys), height=6.0, squeeze=False, sharex="col")
    for col, key in enumerate(keys):
        top, bottom = axes[0, col], axes[1, col]
        for frame, name, line_color in ((legacy, "legacy", LEGACY_COLOR), (loop, "reward loop", LOOP_COLOR)):
            part = frame[["step", key]].dropna()
            top.plot(
                part["step"],
                part[key],
                color=line_color,
                label=name,
                marker="o" if len(part) <= 30 else None,
                markersize=3,
            )
        both = pd.merge(
            legacy[["step", key]].dropna(), loop[["step", key]].dropna(), on="step", suffixes=("_legacy", "_loop")
        )
        bottom.plot(both["step"], both[f"{key}_loop"] - both[f"{key}_legacy"], color="0.2", label="loop - legacy")
        bottom.axhline(0.0, color="0.5", linestyle=":", linewidth=1)
        top.set_title(key)
        bottom.set_xlabel("step")
        bottom.set_ylabel("loop - legacy")
        top.legend(loc="best", fontsize="small")
    return fig


def _require(scores, columns: tuple[str, ...], what: str) -> None:
    if scores is None:
        raise FigureSkipped(f"no scores.parquet for the {what}")
    missing = [c for c in columns if c not in scores.columns]
    if missing:
        raise FigureSkipped(f"scores.parquet has no {', '.join(missing)} column for the {what}")


def _finite_range(xs, ys) -> tuple[float, float]:
    import numpy as np

    both = np.concatenate([xs, ys])
    both = both[np.isfinite(both)]
    if not len(both):
        return 0.0, 1.0
    return float(both.min()), float(both.max())
