"""Figures of a sweep (`rlrm bench simulate --sweep KEY=V1,V2,...`): small multiples, one line per mode against
the swept value, where a bar per `mode @ value` would need one bar for every pair (30 for 5 modes x 6 values).

    fig = sweep_figure(bench)                     # speedup vs sync and trainer idle against the swept value
    fig = sweep_panels(bench, benchmark.IDLE_COLUMNS, "Idle ratios")   # a panel per idle kind

The x axis is the mean reward latency when the sweep moved the latency, else the swept value itself (numbers when
every value is one, evenly spaced labels otherwise).
"""

from __future__ import annotations

from rlrm.report.benchmark import MAX_WIDTH_IN, is_sweep, ordered, split_baseline
from rlrm.report.figures import FigureSkipped, color, new_figure

TITLES = {
    "speedup_vs_sync": "Speedup vs sync",
    "tokens_per_s": "Throughput (tokens/s)",
    "idle_trainer": "Trainer idle",
    "idle_rollout": "Rollout idle",
    "idle_reward_wait": "Reward wait",
    "hiding_efficiency": "Latency-hiding efficiency",
}
IDLE = ("idle_trainer", "idle_rollout", "idle_reward_wait")


def sweep_figure(bench):
    """Speedup vs sync and idle/trainer per mode against the swept value (one line per mode)."""
    return sweep_panels(bench, ("speedup_vs_sync", "idle_trainer"), "")


def throughput_figure(bench):
    """Tokens/s and speedup vs sync per mode against the swept value."""
    return sweep_panels(bench, ("tokens_per_s", "speedup_vs_sync"), "")


def idle_figure(bench):
    """Trainer, rollout and reward-wait idle per mode against the swept value (a panel each, y from 0 to 1)."""
    return sweep_panels(bench, IDLE, "Idle ratios (fraction of wall time)")


def hiding_figure(bench):
    """Latency-hiding efficiency per mode against the swept value."""
    return sweep_panels(bench, ("hiding_efficiency",), "")


def sweep_panels(bench, columns, title: str):
    """One panel per column present in results.csv, one line per mode (the mean over repeats at each point)."""
    rows, _ = split_baseline(bench.results)
    if not is_sweep(rows):
        raise FigureSkipped("results hold no sweep (sweep_value)")
    panels = [c for c in columns if c in rows.columns]
    if not panels:
        raise FigureSkipped(f"results has none of the columns {', '.join(columns)}")
    xs, label, ticks = sweep_axis(rows)
    fig, axes = new_figure(1, len(panels), width=min(5.0 * len(panels), MAX_WIDTH_IN), squeeze=False)
    frame = rows.assign(_x=xs)
    modes = [m for m in ordered(frame["mode"].astype(str)) if m in set(frame["mode"].astype(str))]
    for ax, col in zip(axes[0], panels):
        for i, mode in enumerate(modes):
            mine = frame[frame["mode"].astype(str) == mode].groupby("_x")[col].mean().sort_index()
            ax.plot(mine.index, mine.to_numpy(), marker="o", color=color(i), label=mode)
        ax.set_title(TITLES.get(col, col))
        ax.set_xlabel(label)
        if ticks:
            ax.set_xticks(range(len(ticks)), ticks)
        if col in IDLE:
            ax.set_ylim(0, 1.05)
        if col == "speedup_vs_sync":
            ax.axhline(1.0, color="0.3", linestyle=":", linewidth=1)
    axes[0, 0].legend(loc="best", fontsize="small")
    if title:
        fig.suptitle(title)
    return fig


def sweep_axis(rows):
    """(x of each row, axis label, tick labels or [] for a numeric axis)."""
    import pandas as pd

    key = str(rows["sweep_key"].dropna().iloc[0]) if "sweep_key" in rows.columns else "swept value"
    values = rows["sweep_value"].astype(str)
    numeric = pd.to_numeric(values, errors="coerce")
    if key.startswith("reward.latency") and "mean_latency_s" in rows.columns:
        return rows["mean_latency_s"].astype(float).to_numpy(), "mean reward latency (s)", []
    if numeric.notna().all():
        return numeric.to_numpy(), key, []
    order = list(dict.fromkeys(values))
    return values.map(order.index).astype(float).to_numpy(), key, order
