"""What separates each mode from its bound: a benchmark folder's step time, split where it goes.

    PYTHONPATH=. .venv/bin/python benchmarks/mode_overheads.py bench/reward-latency-1

Reads a `rlrm bench reward-latency` folder (its summary.json bounds and phases, each run's metrics.jsonl) and
splits each mode's mean step time after the first (medians over repeats) into:
- `bound`: the mode's lower bound (rlrm/bench/limits.py: perfect overlap, zero overhead);
- `train slowdown`: the trainer's work in this mode (old/ref log-probs, advantages, update, weight sync,
  timing_s/*) less the same work in the zero-latency sync runs: what overlapping generation costs training
  on shared cores;
- `trainer idle`: the step's share the trainer sat idle (idle/trainer x step). idle/trainer is the step's time
  outside the trainer's timed phases, so it holds Python between phases, collation and metrics as well as
  waiting for generation or rewards: work + idle = step;
- `after`: the bookkeeping after each step (trace, sample log; the last step's validation left out), outside the
  step time the benchmark measures and so outside its throughput, in every mode alike.
Work and idle decompose the measured step, not the gap: `bound + gap = step`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from statistics import median

TRAINER = ("old_log_prob", "ref", "adv", "update_actor", "update_weights")


def steady(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    # perf/time_per_step, as the benchmark's step time: the last step's validation is not part of it
    steps = [r for r in rows if r.get("step", 0) > 0 and "perf/time_per_step" in r]
    return steps[1:] if len(steps) > 1 else steps


def split(run: Path) -> dict[str, float]:
    steps = steady(run)
    step = sum(r["perf/time_per_step"] for r in steps) / len(steps)
    after = [r["timing_s/step"] - r["perf/time_per_step"] for r in steps[:-1] if "timing_s/step" in r]
    work = sum(sum(r.get(f"timing_s/{p}", 0.0) for p in TRAINER) for r in steps) / len(steps)
    idle = sum(r.get("idle/trainer", 0.0) * r["perf/time_per_step"] for r in steps) / len(steps)
    return {"step": step, "work": work, "idle": idle, "after": sum(after) / len(after) if after else 0.0}


def main(folder: Path) -> None:
    summary = json.loads((folder / "summary.json").read_text())
    runs = sorted((folder / "runs").iterdir())
    base = [split(r) for r in runs if r.name.startswith("sync-nolatency-")]
    base_work = median(b["work"] for b in base)
    print(f"zero-latency sync: trainer work {base_work:.3f} s a step (median of {len(base)} runs)")
    print("| mode | step s | bound s | of limit | trainer work s | train slowdown s | trainer idle s | after s |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, stats in summary["modes"].items():
        mine = [split(r) for r in runs if r.name.rsplit("-r", 1)[0] == mode]
        if not mine:
            continue
        step = median(m["step"] for m in mine)
        work = median(m["work"] for m in mine)
        idle = median(m["idle"] for m in mine)
        after = median(m["after"] for m in mine)
        bound = stats.get("bound_step_s") or float("nan")
        print(
            f"| {mode} | {step:.3f} | {bound:.3f} | {bound / step:.2f} | {work:.3f} | {work - base_work:+.3f} | "
            f"{idle:.3f} | {after:.3f} |"
        )


if __name__ == "__main__":
    if len(sys.argv) != 2 or not (Path(sys.argv[1]) / "summary.json").is_file():
        sys.exit("usage: benchmarks/mode_overheads.py BENCH_FOLDER (a `rlrm bench reward-latency` output folder)")
    main(Path(sys.argv[1]))
