"""From a run's metrics rows to one results row, and the comparisons between rows.

    row = run_row(read_metrics(run_dir / "metrics.jsonl"))
    rows = compare(rows)        # adds speedup_vs_sync and hiding_efficiency

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
    "run_dir",
    "steps",
    "tokens_per_s",
    "samples_per_s",
    "steps_per_hour",
    "step_time_p50",
    "step_time_p90",
    "idle_trainer",
    "idle_rollout",
    "idle_reward_wait",
    "staleness_mean",
    "staleness_max",
    "reward_failures",
    "final_reward",
    "val_accuracy",
    "speedup_vs_sync",
    "hiding_efficiency",
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
        "samples_per_s": sum(samples) / total,
        "steps_per_hour": 3600.0 * len(steps) / total,
        "step_time_p50": quantile(times, 0.5),
        "step_time_p90": quantile(times, 0.9),
        "idle_trainer": _weighted(steps, "idle/trainer", times),
        "idle_rollout": _weighted(steps, "idle/rollout", times),
        "idle_reward_wait": _weighted(steps, "idle/reward_wait", times),
        "staleness_mean": staleness,
        "staleness_max": max(r.get("async/staleness_max", 0) for r in steps),
        "reward_failures": sum(r.get("reward/failures", 0) for r in steps),
        "final_reward": steps[-1].get("critic/score/mean", math.nan),
        "val_accuracy": val[-1] if val else math.nan,
    }


def compare(rows: list[dict]) -> list[dict]:
    """Add `speedup_vs_sync` (over sync's mean throughput under the same latency) and
    `hiding_efficiency` (over the zero-latency sync baseline's mean throughput)."""

    def mean_tps(pred) -> float:
        values = [r["tokens_per_s"] for r in rows if pred(r)]
        return sum(values) / len(values) if values else math.nan

    baseline = mean_tps(lambda r: r["mode"] == "sync" and r["latency"] == "none")
    out = []
    for r in rows:
        sync = mean_tps(lambda s, lat=r["latency"]: s["mode"] == "sync" and s["latency"] == lat)
        out.append(
            {**r, "speedup_vs_sync": r["tokens_per_s"] / sync, "hiding_efficiency": r["tokens_per_s"] / baseline}
        )
    return out


def mode_means(rows: list[dict], latency: str) -> dict[str, dict[str, float]]:
    """Per mode, the mean of every numeric column over its repeats under `latency`."""
    out: dict[str, dict[str, float]] = {}
    for mode in dict.fromkeys(r["mode"] for r in rows if r["latency"] == latency):
        mine = [r for r in rows if r["mode"] == mode and r["latency"] == latency]
        keys = [k for k in COLUMNS if isinstance(mine[0].get(k), (int, float)) and k != "repeat"]
        out[mode] = {k: sum(r[k] for r in mine) / len(mine) for k in keys}
        out[mode]["repeats"] = len(mine)
    return out


def _weighted(steps: list[dict], key: str, weights: list[float]) -> float:
    pairs = [(r[key], w) for r, w in zip(steps, weights) if key in r]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else math.nan


def finite_json(value):
    """`value` with every non-finite float replaced by None (JSON has no NaN: summary.json writes null)."""
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_json(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value
