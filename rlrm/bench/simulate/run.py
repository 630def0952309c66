"""Simulate every mode (and every point of a sweep) and write a folder `rlrm report` reads like a benchmark's.

    result = run_simulation(spec, out=Path("sim/cluster"), sweep=parse_sweep("reward.latency_scale=0.5,1,2"))
    result.rows        # one results row per (sweep point, mode), plus a zero-latency sync row per point

Written: `results.csv` and `results.parquet` (the benchmark's columns, plus `sweep_key`,
`sweep_value`, `mean_latency_s`, `stopped` (why a run stopped early, as training would) and `samples`
(those trained; `reward_failures` counts over `reward_samples`, those scored)), `summary.json`, `spec.yaml` (what ran) and per run
`runs/[<point>/]<mode>/{metrics.jsonl,trace.json,config.yaml}`. Speedup is over sync at the
same sweep point, hiding efficiency over that point's zero-latency sync run.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlrm.bench.results import COLUMNS, compare, mode_stats, no_step_row, run_row
from rlrm.bench.simulate.draws import draw_workload
from rlrm.bench.simulate.simulation import simulate
from rlrm.bench.simulate.spec import SimSpec, dump_spec, load_spec
from rlrm.config.latency import parse_latency
from rlrm.engine.metrics.trace import write_chrome_trace
from rlrm.errors import ConfigError, RunFolderError, writing_to
from rlrm.json_values import json_safe

BASELINE = "sync-nolatency"
MAX_REPEATS = 100  # as `rlrm bench reward-latency`: a typo of 100000000 must not simulate without end
EXTRA_COLUMNS = ["sweep_key", "sweep_value", "mean_latency_s", "stopped", "samples"]


@dataclass
class SimResult:
    out: Path | None  # None: nothing written
    rows: list[dict]
    summary: dict
    seconds: float  # wall time of the simulation itself (no writing)
    notes: list[str] = field(default_factory=list)


def run_simulation(
    spec: SimSpec,
    out: Path | None,
    sweep: tuple[str, list[str]] | None = None,
    repeats: int = 1,
    write: bool = True,
    latencies: list | None = None,
) -> SimResult:
    """Simulate `spec` under each of its modes, at each sweep point; write the folder unless `write` is off.

    `latencies`: one [steps, N] array of first-attempt reward latencies per repeat (a benchmark's
    own, rlrm/bench/simulate/replay.py): repeat r replays latencies[r] instead of drawing them.

    Raises:
        ConfigError: more than MAX_REPEATS repeats.
        RunFolderError: `out` holds files.
    """
    if repeats > MAX_REPEATS:
        raise ConfigError(
            f"--repeats {repeats:,}: at most {MAX_REPEATS} simulated repeats (each simulates every mode again; "
            "5 give a bootstrap 95% interval)"
        )
    if out is not None and write:
        out = Path(out)
        if out.exists() and any(out.iterdir()):
            raise RunFolderError(f"{out} is not empty; choose another --out or remove it")
    key, overrides = sweep if sweep else (None, [None])
    base = spec.model_dump(mode="json")
    rows, runs, notes, seconds = [], {}, [], 0.0
    for override in overrides:
        point = load_spec(overrides=[override], base=base) if override else spec
        value = override.partition("=")[2] if override else None
        label = _label(key, value)
        started = time.perf_counter()
        point_rows, point_runs = _simulate_point(point, repeats, label, latencies)
        seconds += time.perf_counter() - started
        for row in point_rows:
            row.update(sweep_key=key, sweep_value=value)
            if row["stopped"]:
                notes.append(f"{row['run_dir']}: {row['stopped']}")
        rows += compare(point_rows, is_baseline)
        runs.update(point_runs)
    summary = _summary(
        spec, rows, key, [o.partition("=")[2] for o in overrides if o is not None] if key else [], repeats
    )
    if write and out is not None:
        _write(out, spec, rows, runs, summary)
    return SimResult(out, rows, summary, seconds, notes)


def _simulate_point(spec: SimSpec, repeats: int, label: str, latencies: list | None) -> tuple[list[dict], dict]:
    rows, runs = [], {}
    latency = parse_latency(spec.reward.latency).scaled(spec.reward.latency_scale)
    try:
        mean_latency = latency.mean()
    except ValueError:
        mean_latency = math.inf
    for repeat in range(len(latencies) if latencies else repeats):
        seeded = spec.model_copy(
            update={"workload": spec.workload.model_copy(update={"seed": spec.workload.seed + repeat})}
        )
        draws = draw_workload(seeded, first_latency=latencies[repeat] if latencies else None)
        plan = [(BASELINE, "sync", draw_workload(seeded, latency=False, lengths=draws), "none", math.nan, 0.0)]
        # as the benchmark writes it: the --latency spec, its scale apart (a spec's own may be "none" too: the
        # baseline is told by its run folder, is_baseline)
        scale = spec.reward.latency_scale
        plan += [(mode, mode, draws, spec.reward.latency, scale, mean_latency) for mode in spec.modes]
        for name, mode, mode_draws, latency_text, latency_scale, mean in plan:
            run = simulate(seeded, mode, mode_draws)
            run_dir = "/".join(p for p in ("runs", label, f"{name}-r{repeat}") if p)
            row = {
                "mode": mode,
                "repeat": repeat,
                "latency": latency_text,
                "latency_scale": latency_scale,
                "run_dir": run_dir,
                **(run_row(run.rows) if run.rows else no_step_row()),
                "mean_latency_s": mean,
                "stopped": run.stopped,
            }
            rows.append(row)
            runs[run_dir] = (mode, seeded, run)
    return rows, runs


def is_baseline(row: dict) -> bool:
    """A zero-latency sync baseline's row (runs/[<point>/]sync-nolatency-r<repeat>), not a mode's run whose
    latency is "none" as well."""
    return Path(row["run_dir"]).name.startswith(f"{BASELINE}-r")


def _label(key: str | None, value: str | None) -> str:
    if key is None:
        return ""
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", f"{key}={value}")


def _summary(spec: SimSpec, rows: list[dict], key: str | None, values: list[str], repeats: int) -> dict:
    summary = {
        "simulated": True,
        "description": spec.description,
        "latency": spec.reward.latency,
        "latency_scale": spec.reward.latency_scale,
        "steps": spec.workload.steps,
        "repeats": repeats,
        "seed": spec.workload.seed,
        "sweep": {"key": key, "values": values} if key else None,
    }
    if not key:
        summary["mean_latency_s"] = rows[1]["mean_latency_s"] if len(rows) > 1 else None
        summary["baseline"] = mode_stats([r for r in rows if is_baseline(r)], "none").get("sync", {})
        summary["modes"] = mode_stats([r for r in rows if not is_baseline(r)], spec.reward.latency)
    else:
        summary["points"] = {
            value: {
                r["mode"]: {
                    "speedup_vs_sync": r["speedup_vs_sync"],
                    "hiding_efficiency": r["hiding_efficiency"],
                    "tokens_per_s": r["tokens_per_s"],
                    "idle_trainer": r["idle_trainer"],
                    "reward_failures": r["reward_failures"],
                    "samples": r["samples"],
                }
                for r in rows
                if r["sweep_value"] == value and not is_baseline(r)
            }
            for value in values
        }
    return summary


def _write(out: Path, spec: SimSpec, rows: list[dict], runs: dict, summary: dict) -> None:
    with writing_to(out):  # a full disk: one line naming the folder; results.csv is never left cut under its name
        _write_files(out, spec, rows, runs, summary)


def _write_files(out: Path, spec: SimSpec, rows: list[dict], runs: dict, summary: dict) -> None:
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.yaml").write_text(dump_spec(spec))
    for run_dir, (mode, point, run) in runs.items():
        folder = out / run_dir
        folder.mkdir(parents=True, exist_ok=True)
        config = {"simulated": True, "trainer": {"mode": mode}, "spec": point.model_dump(mode="json")}
        (folder / "config.yaml").write_text(json.dumps(config, indent=1))  # JSON is YAML
        with open(folder / "metrics.jsonl", "w") as fh:
            for row in run.rows:
                fh.write(json.dumps(row) + "\n")
        write_chrome_trace(folder / "trace.json", run.spans)
    frame = pd.DataFrame(rows, columns=COLUMNS + EXTRA_COLUMNS)
    for name, write in (("results.csv", frame.to_csv), ("results.parquet", frame.to_parquet)):
        tmp = out / f"{name}.tmp"
        write(tmp, index=False)
        tmp.replace(out / name)
    (out / "summary.json").write_text(json.dumps(json_safe(summary), indent=2))
