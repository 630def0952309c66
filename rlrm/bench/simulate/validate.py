"""Predicted against measured: calibrate on a benchmark's zero-latency sync run, simulate its modes.

    check = validate_bench(Path("bench/reward-latency-1"), out=Path("sim/check"))
    check.table        # per mode: measured and predicted speedup vs sync and idle/trainer, and the errors

Only the benchmark's zero-latency `sync` runs (`runs/sync-nolatency-r*`) are read for the costs;
the latency (spec and scale), steps, repeats, seed and reward concurrency are the benchmark's own
(results.csv, summary.json), so the prediction sees nothing of the runs it is compared with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rlrm.bench.results import mode_means
from rlrm.bench.simulate.calibrate import Calibration, calibrate
from rlrm.bench.simulate.run import SimResult, run_simulation
from rlrm.bench.simulate.spec import MODES, load_spec
from rlrm.errors import RunFolderError


@dataclass
class Validation:
    calibration: Calibration
    result: SimResult
    table: list[dict]  # mode, measured/predicted speedup and idle_trainer, errors
    latency: str


def is_bench_folder(path: Path) -> bool:
    return (Path(path) / "results.csv").is_file() and (Path(path) / "runs").is_dir()


def validate_bench(folder: Path, out: Path | None, overrides: list[str] = (), write: bool = True) -> Validation:
    """Calibrate on `folder`'s zero-latency sync runs, simulate its modes, compare with what it measured."""
    import pandas as pd

    folder = Path(folder)
    results = pd.read_csv(folder / "results.csv")
    summary = _summary(folder)
    records = results.to_dict("records")
    base = [r for r in records if r["mode"] == "sync" and str(r["latency"]).lower() == "none"]
    if not base:
        raise RunFolderError(f"{folder}/results.csv has no zero-latency sync run (latency none) to calibrate on")
    cal = calibrate([folder / r["run_dir"] for r in base])
    latency = summary.get("latency")
    scale = summary.get("latency_scale")
    if not latency or scale is None:
        raise RunFolderError(f"{folder}/summary.json does not say the benchmark's latency and latency_scale")
    measured = mode_means(records, latency)
    modes = [m for m in MODES if m in measured]
    sets = [f"reward.latency={latency}", f"reward.latency_scale={scale!r}", f"workload.steps={int(summary.get('steps', 10))}",
            f"workload.seed={int(summary.get('seed', 0))}", f"modes=[{','.join(modes)}]"]  # fmt: skip
    if summary.get("reward_max_concurrency"):
        sets.append(f"reward.max_concurrency={int(summary['reward_max_concurrency'])}")
    spec = load_spec(overrides=[*sets, *overrides], base=cal.spec_values)
    result = run_simulation(spec, out, repeats=int(summary.get("repeats", 1)), write=write)
    simulated = next((r["latency"] for r in result.rows if r["latency"] != "none"), "none")
    predicted = mode_means(result.rows, simulated)
    table = []
    for mode in modes:
        m, p = measured[mode], predicted[mode]
        table.append({
            "mode": mode,
            "measured_speedup": m["speedup_vs_sync"], "predicted_speedup": p["speedup_vs_sync"],
            "speedup_error": p["speedup_vs_sync"] / m["speedup_vs_sync"] - 1,
            "measured_idle_trainer": m["idle_trainer"], "predicted_idle_trainer": p["idle_trainer"],
            "idle_trainer_error": p["idle_trainer"] - m["idle_trainer"],
            "measured_tokens_per_s": m["tokens_per_s"], "predicted_tokens_per_s": p["tokens_per_s"],
        })  # fmt: skip
    if write and out is not None:
        pd.DataFrame(table).to_csv(Path(out) / "validation.csv", index=False)
    return Validation(cal, result, table, latency)


def _summary(folder: Path) -> dict:
    path = folder / "summary.json"
    if not path.is_file():
        raise RunFolderError(f"{folder} has results.csv but no summary.json (the latency it ran under)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RunFolderError(f"{path} is not valid JSON ({exc.msg})") from None
