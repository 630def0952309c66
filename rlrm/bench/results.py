"""From a run's metrics rows to one results row, and the comparisons between rows.

    row = run_row(read_metrics(run_dir / "metrics.jsonl"))
    rows = compare(rows)        # adds speedup_vs_sync and hiding_efficiency
    stats = mode_stats(rows, "uniform:1:40")   # per mode: medians over repeats, intervals, within noise

Pure functions. Throughput is total tokens over total step time (every step, warm-up included);
idle ratios are weighted by step time, which makes them the run's own ratios since the step
windows tile the training time.
"""

from __future__ import annotations

import math

from rlrm.stats import quantile

COLUMNS = [
    "mode",
    "repeat",
    "latency",
    "latency_scale",  # reward.inject.scale of the run (NaN in the baseline): chosen per repeat unless given
    "tool_latency",  # rollout.agent.inject.latency ("none" in the baseline and without --tool-latency)
    "run_dir",
    "steps",
    "tokens_per_s",
    "samples_per_s",
    "steps_per_hour",
    "step_time_p50",
    "step_time_p90",
    "step_time_mean",
    "idle_trainer",
    "idle_rollout",
    "idle_reward_wait",
    "staleness_mean",
    "staleness_max",
    "reward_failures",
    "reward_samples",  # scored, before any group was dropped: the share of reward_failures is over these
    "final_reward",
    "val_accuracy",
    "speedup_vs_sync",
    "hiding_efficiency",
    "bound_step_s",
    "of_limit",
    "speedup_median",
    "speedup_lo",
    "speedup_hi",
    "interval",
]


def run_row(rows: list[dict]) -> dict:
    """Summary numbers of one run from its metrics rows (a step-0 validation row is ignored)."""
    steps = [r for r in rows if r.get("step", 0) > 0 and "perf/time_per_step" in r]
    if not steps:
        raise ValueError("the run has no completed step")
    times = [r["perf/time_per_step"] for r in steps]
    total = sum(times)
    samples = [r.get("batch/num_samples", 0) for r in steps]
    staleness = sum(r.get("async/staleness_mean", 0.0) * s for r, s in zip(steps, samples)) / max(sum(samples), 1)
    val = [r["val/accuracy"] for r in rows if "val/accuracy" in r]
    return {
        "steps": len(steps),
        "tokens_per_s": sum(r.get("perf/total_num_tokens", 0) for r in steps) / total,
        "samples": sum(samples),  # trained: with reward_failures, the share that failed
        "samples_per_s": sum(samples) / total,
        "steps_per_hour": 3600.0 * len(steps) / total,
        "step_time_p50": quantile(times, 0.5),
        # the steady state: after the first step (warm-up, and the off-policy modes filling their pipeline)
        "step_time_mean": sum(times[1:]) / (len(times) - 1) if len(times) > 1 else times[0],
        "step_time_p90": quantile(times, 0.9),
        "idle_trainer": _weighted(steps, "idle/trainer", times),
        "idle_rollout": _weighted(steps, "idle/rollout", times),
        "idle_reward_wait": _weighted(steps, "idle/reward_wait", times),
        "staleness_mean": staleness,
        "staleness_max": max(r.get("async/staleness_max", 0) for r in steps),
        "reward_failures": sum(r.get("reward/failures", 0) for r in steps),
        "reward_samples": sum(r.get("reward/samples", r.get("batch/num_samples", 0)) for r in steps),
        "final_reward": steps[-1].get("critic/score/mean", math.nan),
        "val_accuracy": val[-1] if val else math.nan,
    }


def no_step_row() -> dict:
    """`run_row`'s numbers for a run that stopped before its first step ended: nothing measured."""
    row = {key: math.nan for key in COLUMNS[COLUMNS.index("tokens_per_s") : COLUMNS.index("val_accuracy") + 1]}
    return {**row, "steps": 0, "samples": 0, "reward_failures": 0, "reward_samples": 0}


def compare(rows: list[dict], baseline=None) -> list[dict]:
    """Add `speedup_vs_sync` (over sync's throughput under the same latency) and `hiding_efficiency`
    (over the zero-latency sync baseline's throughput).

    Each run is paired with sync's run of the same repeat when there is one (a benchmark runs every mode
    and a baseline in each repeat, so a shared machine's drift between repeats cancels in the ratio),
    else with the mean over sync's runs. `baseline(row)` tells the baseline's rows (default: latency "none");
    a baseline is sync's run of its own latency, never pooled with a mode's run that also has none."""
    baseline = baseline or (lambda r: str(r["latency"]) == "none")

    def tps(pred) -> float:
        values = [r["tokens_per_s"] for r in rows if pred(r)]
        return sum(values) / len(values) if values else math.nan

    def paired(r, of) -> float:
        same = tps(lambda s: of(s) and s.get("repeat") == r.get("repeat"))
        return same if math.isfinite(same) else tps(of)

    def sync_of(r):
        latency, base = str(r["latency"]), baseline(r)
        return lambda s: s["mode"] == "sync" and str(s["latency"]) == latency and baseline(s) == base

    def ratio(a: float, b: float) -> float:  # NaN where a side measured nothing (a run that stopped at once)
        return a / b if b > 0 and math.isfinite(a) else math.nan

    return [
        {
            **r,
            "speedup_vs_sync": ratio(r["tokens_per_s"], paired(r, sync_of(r))),
            "hiding_efficiency": ratio(r["tokens_per_s"], paired(r, baseline)),
        }
        for r in rows
    ]


# the columns whose spread over repeats is part of the result (`<col>_lo`, `<col>_hi` beside the median)
SPREAD_COLUMNS = ("speedup_vs_sync", "hiding_efficiency", "idle_trainer", "idle_rollout", "tokens_per_s")


def mode_stats(rows: list[dict], latency: str) -> dict[str, dict]:
    """Per mode under `latency`: the median over its repeats of every numeric column, the interval of
    each of SPREAD_COLUMNS (`<col>_lo`, `<col>_hi`; rlrm/stats.py says which interval), how many
    repeats, the interval's method, and whether the speedup is within noise of sync's."""
    from rlrm.stats import spread, within_noise

    out: dict[str, dict] = {}
    for mode in dict.fromkeys(r["mode"] for r in rows if str(r["latency"]) == latency):
        mine = [r for r in rows if r["mode"] == mode and str(r["latency"]) == latency]
        keys = [k for k in mine[0] if isinstance(mine[0].get(k), (int, float)) and k != "repeat"]
        stats: dict = {k: spread([r.get(k, math.nan) for r in mine]).median for k in keys}
        for col in SPREAD_COLUMNS:
            if col in keys:
                s = spread([r[col] for r in mine])
                stats[f"{col}_lo"], stats[f"{col}_hi"] = s.lo, s.hi
                if col == "speedup_vs_sync":
                    stats["interval"] = s.method
                    stats["within_noise"] = mode != "sync" and within_noise(s)
        stats["repeats"] = len(mine)
        out[mode] = stats
    return out


def _weighted(steps: list[dict], key: str, weights: list[float]) -> float:
    pairs = [(r[key], w) for r, w in zip(steps, weights) if key in r]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else math.nan
