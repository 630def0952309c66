"""Predicted against measured: calibrate on a benchmark's zero-latency sync run, simulate its modes.

    check = check_against_bench(Path("bench/reward-latency-1"), out=Path("sim/check"))
    check.table        # per mode: measured and predicted speedup vs sync and idle/trainer, and the errors

Only the benchmark's zero-latency `sync` runs (`runs/sync-nolatency-r*`) are read for the costs;
the latency (spec and scale), steps, repeats, seed and reward concurrency are the benchmark's own
(results.csv, summary.json), so the prediction sees none of the timings of the runs it is compared with.
Their input it may see: when the sync runs' traces record each sample's injected latency, each
repeat is simulated on the latencies that repeat's runs drew (the same for every mode of a repeat),
so a heavy tail's rare 30-s timeout hits the prediction where it hit the measurement. The
prediction over fresh draws (the expectation, `drawn_speedup`) is in the table too.

The table also gives each mode's `compute_speed`: how fast its runs trained per token against
the zero-latency run (medians over the mini-batches no decode batch overlapped, steps after the
first). On a shared
machine the same update can take twice as long in one run as in another; a prediction made from
the baseline's costs cannot be closer than that drift allows. `at_speed_speedup` tells the two
apart: the same prediction with every compute cost of each mode's runs (and of sync's, the
denominator) divided by its measured speed: what is left of the error is the model's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlrm.bench.results import mode_stats
from rlrm.bench.simulate.calibrate import Calibration, calibrate
from rlrm.bench.simulate.replay import injected_latencies
from rlrm.bench.simulate.run import SimResult, is_baseline, run_simulation
from rlrm.bench.simulate.spec import MODES, load_spec, spec_from_mapping
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.errors import RunFolderError
from rlrm.results_file import read_results


@dataclass
class BenchCheck:
    calibration: Calibration
    result: SimResult
    table: list[dict]  # mode, measured/predicted speedup and idle_trainer, errors
    latency: str
    replayed: int = 0  # repeats predicted on the latencies the benchmark drew (0: on fresh draws)
    missing: tuple[str, ...] = ()  # columns of a newer rlrm the benchmark's results.csv lacks


def is_bench_folder(path: Path) -> bool:
    return (Path(path) / "results.csv").is_file() and (Path(path) / "runs").is_dir()


def check_against_bench(
    folder: Path, out: Path | None, overrides: Sequence[str] = (), write: bool = True
) -> BenchCheck:
    """Calibrate on `folder`'s zero-latency sync runs, simulate its modes, compare with what it measured."""
    import pandas as pd

    folder = Path(folder)
    records = read_results(folder / "results.csv")
    summary = _summary(folder)
    base = [r for r in records if r["mode"] == "sync" and str(r["latency"]).lower() == "none"]
    if not base:
        raise RunFolderError(f"{folder}/results.csv has no zero-latency sync run (latency none) to calibrate on")
    cal = calibrate([folder / r["run_dir"] for r in base])
    latency = summary.get("latency")
    scale = summary.get("latency_scale")
    if not latency or scale is None:
        raise RunFolderError(f"{folder}/summary.json does not say the benchmark's latency and latency_scale")
    measured = mode_stats(records, latency)
    modes = [m for m in MODES if m in measured]
    sets = [
        f"reward.latency={latency}",
        f"reward.latency_scale={scale!r}",
        f"workload.steps={int(summary.get('steps', 10))}",
        f"workload.seed={int(summary.get('seed', 0))}",
        f"modes=[{','.join(modes)}]",
    ]
    if summary.get("tool_latency"):  # --tool-latency: the baseline's tool calls per sample, at the bench's latency
        calls, timeout_s = _tool_calls(base, folder)
        sets += [
            f"tools.latency={summary['tool_latency']}",
            f"tools.calls_per_sample={calls!r}",
            f"tools.timeout_s={timeout_s!r}",
        ]
    if summary.get("reward_max_concurrency"):
        sets.append(f"reward.max_concurrency={int(summary['reward_max_concurrency'])}")
    spec = load_spec(overrides=[*sets, *overrides], base=cal.spec_values)
    # the expectation over draws, not one realisation: a heavy tail's slowest sample moves a step by seconds
    repeats = max(int(summary.get("repeats", 1)), SIMULATED_REPEATS)
    # and, when the runs' traces hold them, on the latencies the benchmark drew (rlrm/bench/simulate/replay.py):
    # the prediction then meets the runs' own input, and the written folder is that one
    replayed = _measured_latencies(folder, records, latency, spec)
    drawn = run_simulation(spec, out, repeats=repeats, write=write and not replayed)
    result = run_simulation(spec, out, repeats=repeats, write=write, latencies=replayed) if replayed else drawn
    simulated = next((r["latency"] for r in result.rows if not is_baseline(r)), "none")
    predicted = mode_stats([r for r in result.rows if not is_baseline(r)], simulated)
    base_speed = _per_token_update([folder / r["run_dir"] for r in base])
    speeds = {
        mode: base_speed
        / _per_token_update([folder / r["run_dir"] for r in records if r["mode"] == mode and r["latency"] == latency])
        for mode in modes
    }
    at_speed = _at_speed(spec, speeds, repeats, replayed)
    fresh = mode_stats([r for r in drawn.rows if not is_baseline(r)], simulated)
    table = []
    for mode in modes:
        m, p = measured[mode], predicted[mode]
        table.append(
            {
                "mode": mode,
                "measured_speedup": m["speedup_vs_sync"],
                "measured_lo": m.get("speedup_vs_sync_lo", math.nan),
                "measured_hi": m.get("speedup_vs_sync_hi", math.nan),
                "predicted_speedup": p["speedup_vs_sync"],
                "speedup_error": p["speedup_vs_sync"] / m["speedup_vs_sync"] - 1,
                "inside": _inside(p["speedup_vs_sync"], m),
                "measured_idle_trainer": m["idle_trainer"],
                "predicted_idle_trainer": p["idle_trainer"],
                "idle_trainer_error": p["idle_trainer"] - m["idle_trainer"],
                "measured_tokens_per_s": m["tokens_per_s"],
                "predicted_tokens_per_s": p["tokens_per_s"],
                "drawn_speedup": fresh[mode]["speedup_vs_sync"],
                "drawn_error": fresh[mode]["speedup_vs_sync"] / m["speedup_vs_sync"] - 1,
                "compute_speed": speeds[mode],
                "at_speed_speedup": at_speed.get(mode, (math.nan,))[0],
                "at_speed_error": at_speed.get(mode, (math.nan,))[0] / m["speedup_vs_sync"] - 1,
                "at_speed_idle_trainer": at_speed.get(mode, (math.nan, math.nan))[1],
            }
        )
    if write and out is not None:
        pd.DataFrame(table).to_csv(Path(out) / "validation.csv", index=False)
    missing = tuple(c for c in ("speedup_lo", "speedup_hi", "of_limit") if records and c not in records[0])
    return BenchCheck(cal, result, table, latency, replayed=len(replayed) if replayed else 0, missing=missing)


SIMULATED_REPEATS = 5  # simulated runs per mode at least


def _inside(predicted: float, measured: dict) -> bool | None:
    """The prediction lies in the measured speedup's interval (None: one repeat, no interval)."""
    lo, hi = measured.get("speedup_vs_sync_lo", math.nan), measured.get("speedup_vs_sync_hi", math.nan)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return lo <= predicted <= hi


COMPUTE_COSTS = {  # the spec's seconds that scale with the machine's speed (not the reward latency)
    "rollout": (
        "iteration_s",
        "iteration_s_per_seq",
        "prefill_s_per_token",
        "batch_overhead_s",
        "submit_s",
        "return_s",
        "first_batch_extra_s",
    ),
    "trainer": (
        "collate_s",
        "collate_s_per_token",
        "adv_s",
        "adv_s_per_sample",
        "old_log_prob_s",
        "old_log_prob_s_per_token",
        "ref_s",
        "ref_s_per_token",
        "minibatch_s",
        "minibatch_s_per_token",
        "weight_sync_s",
        "step_overhead_s",
        "first_step_extra_s",
    ),
    "reward": ("base_s",),
}


def _measured_latencies(folder: Path, records: list[dict], latency: str, spec) -> list | None:
    """Per repeat of the benchmark, the reward latencies its sync run drew (every mode of a repeat draws the
    same ones), or None when one is not in its trace."""
    runs = sorted(
        (r for r in records if r["mode"] == "sync" and r["latency"] == latency), key=lambda r: int(r["repeat"])
    )
    w = spec.workload
    found = [
        injected_latencies(
            folder / r["run_dir"], w.steps, w.prompts_per_step * w.samples_per_prompt, spec.reward.timeout_s
        )
        for r in runs
    ]
    return found if found and all(f is not None for f in found) else None


def _at_speed(spec, speeds: dict[str, float], repeats: int, latencies: list | None) -> dict[str, tuple[float, float]]:
    """Per mode, the predicted (speedup, idle/trainer) with its compute costs divided by its measured speed."""
    throughput, idle = {}, {}
    for mode, speed in speeds.items():
        if not math.isfinite(speed) or speed <= 0:
            continue
        raw = spec.model_dump(mode="json")
        for section, keys in COMPUTE_COSTS.items():
            for key in keys:
                raw[section][key] /= speed
        raw["modes"] = [mode]
        rows = run_simulation(spec_from_mapping(raw), None, repeats=repeats, write=False, latencies=latencies).rows
        mine = [r for r in rows if not is_baseline(r)]
        throughput[mode] = sum(r["tokens_per_s"] for r in mine) / len(mine)
        idle[mode] = sum(r["idle_trainer"] for r in mine) / len(mine)
    sync = throughput.get("sync")
    return {mode: (value / sync, idle[mode]) for mode, value in throughput.items()} if sync else {}


def _per_token_update(run_dirs: list[Path]) -> float:
    """Median seconds per token of the runs' mini-batches (steps after the first) that no decode
    batch overlapped: the machine's speed, not the sharing of a colocated engine (nan without any)."""
    import statistics

    values = []
    for run_dir in run_dirs:
        if not (run_dir / "trace.json").is_file() or not (run_dir / "metrics.jsonl").is_file():
            continue
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
        windows = [
            (r["perf/wall_s"] - r["perf/time_per_step"], r["perf/wall_s"], r)
            for r in rows
            if r.get("step", 0) > 1 and "perf/time_per_step" in r and r.get("batch/num_samples")
        ]
        events = json.loads((run_dir / "trace.json").read_text()).get("traceEvents", [])
        spans = [(e["ts"] / 1e6, (e["ts"] + e.get("dur", 0)) / 1e6, e) for e in events if e.get("ph") == "X"]
        decodes = [(s0, s1) for s0, s1, e in spans if e.get("cat") == "rollout"]
        for s0, s1, e in spans:
            if e.get("cat") != "minibatch" or any(d0 < s1 and s0 < d1 for d0, d1 in decodes):
                continue
            row = next((r for w0, w1, r in windows if w0 <= s0 < w1), None)
            if row is not None:
                tokens = (
                    row["perf/total_num_tokens"] * (e.get("args") or {}).get("samples", 0) / row["batch/num_samples"]
                )
                if tokens > 0:
                    values.append((s1 - s0) / tokens)
    return statistics.median(values) if values else math.nan


def _tool_calls(base: list[dict], folder: Path) -> tuple[float, float]:
    """Tool calls per sample in the zero-latency sync runs (their agent/tool_calls over their samples), and
    their rollout.agent.tool_timeout_s."""
    import yaml

    calls = samples = 0.0
    timeout_s = 10.0
    for r in base:
        run = folder / r["run_dir"]
        config = yaml.safe_load((run / "config.yaml").read_text())
        per_step = config["data"]["train_batch_size"] * config["rollout"]["n"]
        timeout_s = float(config["rollout"]["agent"]["tool_timeout_s"])
        rows = [row for row in read_metrics(run / "metrics.jsonl") if "agent/tool_calls" in row]
        calls += sum(row["agent/tool_calls"] for row in rows)
        samples += per_step * len(rows)
    return (round(calls / samples, 4) if samples else 0.0), timeout_s


def _summary(folder: Path) -> dict:
    path = folder / "summary.json"
    if not path.is_file():
        raise RunFolderError(f"{folder} has results.csv but no summary.json (the latency it ran under)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RunFolderError(f"{path} is not valid JSON ({exc.msg})") from None
