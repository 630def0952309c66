"""Benchmark figures and tables from a `rlrm bench reward-latency` folder.

    table = mode_table(bench)            # one row per mode: median and interval of each result column
    fig = throughput_figure(bench)       # bar heights are table["tokens_per_s"]

Bars show the median over repeats and an error bar spanning its interval (rlrm/stats.py: a
bootstrap 95% interval of the median from 5 repeats, min-max below). The zero-latency `sync`
baseline (latency "none") is drawn as a reference line, not as a mode.
"""

from __future__ import annotations

from rlrm.config.schema import MODES
from rlrm.report.figures import FigureSkipped, color, new_figure
from rlrm.report.timeline import events_frame, read_trace

MODE_ORDER = MODES
MAX_WIDTH_IN = 14.0  # 1,400 px at the report's 100 dpi: a figure wider than a screen is read by no one
IDLE_COLUMNS = {"idle_trainer": "trainer", "idle_rollout": "rollout", "idle_reward_wait": "reward wait"}
PHASE_ORDER = (
    "gen",
    "reward",
    "old_log_prob",
    "ref",
    "adv",
    "update_actor",
    "update_weights",
    "testing",
    "save_checkpoint",
)
# timing_s/<part> -> timing_s/<phase> it is timed inside: its seconds are already in the phase's, so the step-time
# breakdown draws it within that phase, adding no height (docs/metrics.md#timing-keys)
SUB_PHASES = {
    # rlrm/engine/scheduling/sync.py: SyncScheduler._score wakes and puts to sleep a colocated judge inside
    # timer("reward")
    "reward_wake": "reward",
    "reward_sleep": "reward",
    # rlrm/launch/client/rollout_engine.py: ServerRolloutEngine.update_weights, called inside
    # PolicyWeights.publish's timer("update_weights") (rlrm/engine/weights.py)
    "weight_write": "update_weights",
    "weight_load": "update_weights",
    "weight_broadcast": "update_weights",
}
# timed between two steps, outside timing_s/step (rlrm/engine/trainer.py checks the canaries after a step's row):
# in the table, not in the step's stack
AFTER_STEP = ("canary",)
TABLE_COLUMNS = (
    "tokens_per_s",
    "samples_per_s",
    "speedup_vs_sync",
    "hiding_efficiency",
    "of_limit",
    "idle_trainer",
    "idle_rollout",
    "idle_reward_wait",
    "step_time_p50",
    "step_time_p90",
    "staleness_mean",
    "staleness_max",
    "reward_failures",  # a speedup over failed calls times their timeouts, not the scheduling
    "final_reward",
    "val_accuracy",
)


def split_baseline(results):
    """(rows with injected latency, the zero-latency baseline rows)."""
    latency = results["latency"].astype(str).str.lower() if "latency" in results.columns else None
    if latency is None:
        return results, results.iloc[:0]
    is_base = latency.isin(["none", "0", "nan", ""]) & (results.get("mode") == "sync")
    if "run_dir" in results.columns:  # the baseline's own folders: a sync run at latency "none" may be a mode's run
        named = results["run_dir"].astype(str).str.rsplit("/", n=1).str[-1].str.startswith("sync-nolatency-r")
        is_base = named if named.any() else is_base
    if is_base.all():
        return results, results.iloc[:0]
    return results[~is_base], results[is_base]


def categories(rows):
    """A label per row: the mode, or 'mode @ latency' when the folder holds several latencies, or
    'mode @ value' for the points of a sweep (`rlrm bench simulate --sweep`)."""
    modes = rows["mode"].astype(str)
    if is_sweep(rows):
        return modes + " @ " + rows["sweep_value"].astype(str)
    if "latency" in rows.columns and rows["latency"].astype(str).nunique() > 1:
        return modes + " @ " + rows["latency"].astype(str)
    return modes


def is_sweep(rows) -> bool:
    """True for a sweep's results: several values in `sweep_value`."""
    return "sweep_value" in rows.columns and rows["sweep_value"].dropna().astype(str).nunique() > 1


def ordered(labels) -> list[str]:
    """Known modes first in their natural order (sync -> fully-async), then the rest sorted."""

    def key(label: str):
        mode = label.split(" @ ")[0]
        return (MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER), label)

    return sorted(set(labels), key=key)


def mode_table(bench):
    """Median and interval of every known result column per mode (rows ordered sync first).

    Columns: `runs`, then for each result column C: C (median over repeats), C_min and C_max (its
    interval; the value itself for one repeat).
    """
    import pandas as pd

    results = bench.results
    if "mode" not in results.columns:
        raise FigureSkipped("results has no mode column")
    rows, _ = split_baseline(results)
    if rows.empty:
        raise FigureSkipped("results has no rows")
    rows = rows.assign(_cat=categories(rows).to_numpy())
    present = [c for c in TABLE_COLUMNS if c in rows.columns]
    numeric = rows[present].apply(pd.to_numeric, errors="coerce").assign(_cat=rows["_cat"].to_numpy())
    from rlrm.stats import spread

    grouped = numeric.groupby("_cat")
    table = grouped[present].median()
    for col in present:
        spreads = {cat: spread(list(values)) for cat, values in grouped[col]}
        table[f"{col}_min"] = [_or(spreads[c].lo, spreads[c].median) for c in table.index]
        table[f"{col}_max"] = [_or(spreads[c].hi, spreads[c].median) for c in table.index]
    table.insert(0, "runs", grouped.size())
    return table.loc[ordered(table.index)]


def _or(value: float, fallback: float) -> float:
    return fallback if value != value else value  # NaN (no interval: one repeat) -> the value itself


def missing_columns(bench) -> list[str]:
    """Result columns an older rlrm did not write (the report reads the folder all the same)."""
    return [c for c in ("of_limit", "speedup_lo", "speedup_hi", "step_time_mean") if c not in bench.results.columns]


def baseline_value(bench, column: str) -> float | None:
    _, base = split_baseline(bench.results)
    if base.empty or column not in base.columns:
        return None
    return float(base[column].astype(float).mean())


def throughput_figure(bench):
    """Tokens/s and speedup vs sync per mode: bars (median over repeats) with their intervals."""
    table = _table_with(bench, ["tokens_per_s"], "throughput")
    panels = [c for c in ("tokens_per_s", "speedup_vs_sync") if c in table.columns]
    fig, axes = new_figure(
        1, len(panels), width=min(MAX_WIDTH_IN, len(panels) * bar_width(len(table), per=0.6, least=5.0)), squeeze=False
    )
    titles = {"tokens_per_s": "Throughput (tokens/s)", "speedup_vs_sync": "Speedup vs sync"}
    for ax, col in zip(axes[0], panels):
        _bars(ax, table, col)
        ax.set_title(titles[col])
    base = baseline_value(bench, "tokens_per_s")
    if base is not None:
        axes[0, 0].axhline(base, color="0.3", linestyle="--", linewidth=1, label="sync, no latency")
        axes[0, 0].legend(loc="best", fontsize="small")
    if "speedup_vs_sync" in panels:
        axes[0, -1].axhline(1.0, color="0.3", linestyle=":", linewidth=1)
    return fig


def hiding_figure(bench):
    """Latency-hiding efficiency per mode (1 = the injected latency costs nothing)."""
    table = _table_with(bench, ["hiding_efficiency"], "latency hiding")
    fig, ax = new_figure(width=bar_width(len(table), per=0.6))
    _bars(ax, table, "hiding_efficiency")
    ax.axhline(1.0, color="0.3", linestyle=":", linewidth=1)
    ax.set_title("Latency-hiding efficiency")
    return fig


def idle_figure(bench):
    """Idle ratios per mode as grouped bars: trainer, rollout, reward wait (one container each)."""
    table = mode_table(bench)
    present = [c for c in IDLE_COLUMNS if c in table.columns]
    if not present:
        raise FigureSkipped(f"results has none of the columns {', '.join(IDLE_COLUMNS)}")
    import numpy as np

    fig, ax = new_figure(width=bar_width(len(table)))
    pos = np.arange(len(table))
    width = 0.8 / len(present)
    for i, col in enumerate(present):
        mean = table[col].to_numpy()
        err = np.vstack([mean - table[f"{col}_min"].to_numpy(), table[f"{col}_max"].to_numpy() - mean])
        ax.bar(
            pos + (i - (len(present) - 1) / 2) * width,
            mean,
            width,
            yerr=err,
            capsize=2,
            color=color(i),
            label=IDLE_COLUMNS[col],
        )
    category_ticks(ax, list(table.index))
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("fraction of wall time idle")
    ax.set_title("Idle ratios")
    ax.legend(loc="best", fontsize="small")
    return fig


def step_time_table(bench):
    """Mean seconds per step of each timing_s/<phase> per mode (and timing_s/step as `step`); a part of a phase
    (SUB_PHASES) is a column right after it, its seconds also counted in the phase's."""
    import pandas as pd

    results = bench.results
    if "run_dir" not in results.columns or not bench.runs:
        raise FigureSkipped("no run folders to read timing_s/* from")
    rows, _ = split_baseline(results)
    per_run = []
    for label, run_dir in zip(categories(rows), rows["run_dir"].astype(str)):
        run = bench.runs.get(run_dir)
        if run is None:
            continue
        # per trained step, a phase missing from a row as 0 s: a one-off validation (timing_s/testing) or a
        # wait that did not happen that step (StepTimer skips empty ones) is not shown as if on every step
        steps = run.metrics[run.metrics["step"] > 0] if "step" in run.metrics.columns else run.metrics
        timing = steps.filter(like="timing_s/").fillna(0.0)
        means = timing.mean().rename(lambda c: c.split("/", 1)[1])
        per_run.append(means.rename(label))
    if not per_run:
        raise FigureSkipped("the run folders have no timing_s/* metrics")
    frame = pd.DataFrame(per_run)
    table = frame.groupby(level=0).mean()
    return table.loc[ordered(table.index), phase_columns(table.columns)]


def phase_columns(columns) -> list[str]:
    """The phases of `columns` in PHASE_ORDER (others after, by name), each part of a phase (SUB_PHASES) right
    after it, `step` last."""
    top = [p for p in PHASE_ORDER if p in columns]
    top += sorted(c for c in columns if c not in top and c not in SUB_PHASES and c != "step")
    out: list[str] = []
    for phase in top:
        out += [phase, *(part for part, parent in SUB_PHASES.items() if parent == phase and part in columns)]
    out += [part for part in SUB_PHASES if part in columns and part not in out]  # their phase not timed
    return out + (["step"] if "step" in columns else [])


def phase_label(phase: str) -> str:
    """A column of the step-time table as shown: a part of another phase says so."""
    if phase in AFTER_STEP:
        return f"{phase} (after the step)"
    parent = SUB_PHASES.get(phase)
    return phase if parent is None else f"{phase} (part of {parent})"


def step_time_figure(bench):
    """Stacked mean phase times per mode; a black tick marks the measured step time.

    The phases are the trainer's, one after another: `gen` and `reward` are its waits for samples and scores
    (rlrm/engine/scheduling/overlap.py), so what an overlapping mode hides shows as shorter waits, not as a stack
    above the tick; below the tick is the step's untimed time. A part of a phase (SUB_PHASES: a colocated judge's
    wake and sleep, the weight sync's write, load or broadcast) is drawn inside its phase, narrower and hatched,
    adding no height; a part whose phase was not timed is left out (the table has it), as is what is timed
    between steps (AFTER_STEP: the reward canaries).
    """
    import numpy as np

    table = step_time_table(bench)
    phases = [c for c in table.columns if c != "step" and c not in AFTER_STEP]
    fig, ax = new_figure(width=bar_width(len(table)))
    pos = np.arange(len(table))
    bottom = np.zeros(len(table))
    free: dict[str, tuple] = {}  # phase -> (bottom of what its parts have not filled yet, its top)
    for i, phase in enumerate(phases):
        heights = table[phase].fillna(0.0).to_numpy()
        parent = SUB_PHASES.get(phase)
        if parent is None:
            ax.bar(pos, heights, 0.6, bottom=bottom, color=color(i), label=phase)
            free[phase] = (bottom.copy(), bottom + heights)
            bottom += heights
        elif parent in free:
            start, top = free[parent]
            # never above its phase: a resume's weight sync (no update_weights timer) lands in the next step's parts
            inside = np.clip(heights, 0.0, top - start)
            ax.bar(
                pos + 0.15,
                inside,
                0.3,
                bottom=start,
                color=color(i),
                hatch="//",
                edgecolor="white",
                label=phase_label(phase),
            )
            free[parent] = (start + inside, top)
    if "step" in table.columns:
        marker = max(60.0, min(900.0, 9000.0 / len(table)))  # the tick as wide as its bar
        ax.scatter(pos, table["step"].to_numpy(), marker="_", s=marker, color="black", zorder=3, label="step (wall)")
    category_ticks(ax, list(table.index))
    ax.set_ylabel("seconds per step")
    ax.set_title("Step-time breakdown (timing_s/*)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return fig


def injected_latencies(bench, notes: list[str]) -> dict[str, object]:
    """Per mode, the injected latency of every scored sample (seconds, from trace reward events).

    Falls back to the per-step `reward/injected_latency_mean` of metrics.jsonl (noted) when no
    trace carries `args.injected_latency_s`.
    """
    import numpy as np

    rows, _ = split_baseline(bench.results)
    if "run_dir" not in rows.columns:
        return {}
    from_trace: dict = {}
    from_metrics: dict = {}
    for label, run_dir in zip(categories(rows), rows["run_dir"].astype(str)):
        run = bench.runs.get(run_dir)
        if run is None:
            continue
        if run.trace_path is not None:
            try:
                trace = events_frame(read_trace(run.trace_path), lanes={"reward"})
            except (ValueError, TypeError, AttributeError, UnicodeDecodeError) as exc:
                notes.append(f"{run.name}: trace.json is unreadable ({exc})")
                trace = events_frame([])
            values = trace["injected_latency_s"].dropna().to_numpy()
            if len(values) and values.any():  # all zero: nothing was injected
                from_trace.setdefault(label, []).append(values)
        if "reward/injected_latency_mean" in run.metrics.columns:
            values = run.metrics["reward/injected_latency_mean"].dropna().to_numpy()
            if len(values) and values.any():
                from_metrics.setdefault(label, []).append(values)
    source = from_trace or from_metrics
    if source is from_metrics and from_metrics:
        notes.append(
            f"{bench.name}: no per-sample injected latencies in the traces; "
            "the latency figure uses per-step means (reward/injected_latency_mean)"
        )
    merged = {label: np.concatenate(parts) for label, parts in source.items()}
    return {label: merged[label] for label in ordered(merged) if len(merged[label])}


def distinct_latencies(latencies: dict) -> dict:
    """The latencies with identical distributions drawn once: modes given the same draws (the same seed and
    latency) share one entry, named for all of them (`every mode (5) @ 0.5`, `sync, stream`)."""
    import numpy as np

    groups: list[tuple[list[str], tuple[float, ...]]] = []
    for label, values in latencies.items():
        ordered_values = tuple(np.sort(np.asarray(values, dtype=float)).tolist())
        same = next((g for g in groups if g[1] == ordered_values), None)
        if same is None:
            groups.append(([label], ordered_values))
        else:
            same[0].append(label)
    modes = {label.split(" @ ")[0] for label in latencies}
    merged = {}
    for labels, _ in groups:
        merged[_group_name(labels, modes)] = latencies[labels[0]]
    return merged


def _group_name(labels: list[str], modes: set[str]) -> str:
    if len(labels) == 1:
        return labels[0]
    suffixes = {label.partition(" @ ")[2] for label in labels}
    if len(suffixes) > 1:
        return ", ".join(labels)
    mine = [label.split(" @ ")[0] for label in labels]
    suffix = suffixes.pop()
    name = f"every mode ({len(mine)})" if set(mine) == modes else ", ".join(mine)
    return f"{name} @ {suffix}" if suffix else name


def latency_figure(latencies: dict):
    """Injected latency distribution per mode: histogram (left) and empirical CDF (right); modes whose draws are
    identical are drawn once (distinct_latencies), and the title says so."""
    import numpy as np

    if not latencies:
        raise FigureSkipped("no injected latencies (trace args.injected_latency_s or reward/injected_latency_mean)")
    shown = distinct_latencies(latencies)
    fig, (hist_ax, cdf_ax) = new_figure(1, 2, width=10.0)
    everything = np.concatenate(list(shown.values()))
    edges = np.histogram_bin_edges(everything, bins=min(50, max(5, int(np.sqrt(len(everything))))))
    for i, (label, values) in enumerate(shown.items()):
        hist_ax.hist(values, bins=edges, histtype="step", color=color(i), label=label)
        ordered_values = np.sort(values)
        cdf_ax.plot(ordered_values, np.arange(1, len(values) + 1) / len(values), color=color(i), label=label)
    hist_ax.set_title("Injected reward latency")
    if len(shown) < len(latencies):  # five identical lines would read as five modes that agree by chance
        fig.suptitle(
            f"runs given identical latencies are drawn once: {len(shown)} distinct of {len(latencies)}",
            fontsize="medium",
        )
    hist_ax.set_xlabel("seconds")
    hist_ax.set_ylabel("samples")
    cdf_ax.set_title("CDF")
    cdf_ax.set_xlabel("seconds")
    cdf_ax.set_ylim(0, 1.02)
    cdf_ax.legend(loc="lower right", fontsize="small")
    return fig


def _table_with(bench, columns: list[str], what: str):
    table = mode_table(bench)
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise FigureSkipped(f"results has no {', '.join(missing)} column for the {what} figure")
    return table


def _bars(ax, table, col: str) -> None:
    import numpy as np

    mean = table[col].to_numpy()
    err = np.vstack([mean - table[f"{col}_min"].to_numpy(), table[f"{col}_max"].to_numpy() - mean])
    labels = list(table.index)
    ax.bar(
        range(len(labels)),
        mean,
        0.6,
        yerr=err,
        capsize=3,
        color=[color(i) for i in range(len(labels))],
        label="median over repeats (interval)",
    )
    category_ticks(ax, labels)


def bar_width(categories: int, per: float = 1.4, least: float = 6.0) -> float:
    """A bar figure's width in inches: `per` inch a category, at least `least`, at most MAX_WIDTH_IN."""
    return min(MAX_WIDTH_IN, max(least, per * categories))


def category_ticks(ax, labels: list[str]) -> None:
    """A tick per bar; labels turned 45 degrees (anchored at their end) when they would overprint level: about 7 px
    a character at the report's font size and 100 dpi, against the axes' width."""
    fig = ax.get_figure()
    room_px = ax.get_position().width * fig.get_figwidth() * 100
    crowded = any(7 * len(label) + 8 > room_px / max(1, len(labels)) for label in labels)
    if crowded:
        ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", rotation_mode="anchor", fontsize="small")
    else:
        ax.set_xticks(range(len(labels)), labels)
