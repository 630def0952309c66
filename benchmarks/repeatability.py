"""Do invocations of the default `rlrm bench reward-latency` agree? Runs it N times back to back (or reads
folders it already wrote) and prints each mode's median speedup, idle ratios and `of limit` per invocation,
with the largest disagreement between any two (speedup: max/min - 1; idle ratios: max - min).

    PYTHONPATH=. .venv/bin/python benchmarks/repeatability.py run 5 bench/repeatability   # 5 new invocations
    PYTHONPATH=. .venv/bin/python benchmarks/repeatability.py run 5 bench/r7 --repeats 7  # with other options
    PYTHONPATH=. .venv/bin/python benchmarks/repeatability.py read bench/repeatability/inv*  # existing folders

The issue's target: every speedup within 7% and every idle ratio within 0.05 between invocations.

After the table, where the disagreement comes from: each overlapping mode's per-repeat speedups (results.csv)
split into their spread within an invocation and the spread of the invocations' means (if the second is no
larger than the first over sqrt(repeats), invocations differ by chance draws of repeats, not by a bias of
their own), and a projection: invocations of R repeats drawn from the pooled per-repeat speedups (bootstrap,
seeded), how often five of them agree within 7%, for R = 5, 7, 10, 15, 20.
"""

from __future__ import annotations

import csv
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path


def invoke(out: Path, options: list[str]) -> float:
    start = time.perf_counter()
    argv = [sys.executable, "-m", "rlrm", "bench", "reward-latency", "--out", str(out), *options]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def table(folders: list[Path]) -> None:
    summaries = [json.loads((f / "summary.json").read_text())["modes"] for f in folders]
    print(f"| mode | speedup per invocation ({len(folders)}) | largest disagreement | idle trainer | idle rollout |"
          " of limit |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    worst = {"speedup": 0.0, "idle": 0.0}
    for mode in summaries[0]:
        speed = [s[mode]["speedup_vs_sync"] for s in summaries]
        trainer = [s[mode]["idle_trainer"] for s in summaries]
        rollout = [s[mode]["idle_rollout"] for s in summaries]
        limit = [s[mode].get("of_limit") for s in summaries]
        apart = max(speed) / min(speed) - 1
        worst["speedup"] = max(worst["speedup"], apart)
        worst["idle"] = max(worst["idle"], max(trainer) - min(trainer), max(rollout) - min(rollout))
        quiet = sum(bool(s[mode].get("within_noise")) for s in summaries)
        noise = f" (within noise in {quiet})" if quiet else ""
        print(
            f"| {mode} | {' / '.join(f'{x:.2f}x' for x in speed)}{noise} | {apart:.1%} | "
            f"{min(trainer):.2f}-{max(trainer):.2f} | {min(rollout):.2f}-{max(rollout):.2f} | "
            f"{' / '.join('-' if x is None else f'{x:.2f}' for x in limit)} |"
        )
    print(f"largest speedup disagreement {worst['speedup']:.1%}; largest idle-ratio disagreement {worst['idle']:.3f}")
    # the injected latency each invocation drew (its median scale): a speedup over sync grows with it
    means = [json.loads((f / "summary.json").read_text()).get("mean_latency_s") for f in folders]
    print("mean injected latency per invocation: " + " / ".join("-" if m is None else f"{m:.3f} s" for m in means))


def per_repeat(folder: Path, mode: str) -> list[float]:
    """`mode`'s speedup over sync in each repeat of one invocation (its latent runs in results.csv)."""
    with open(folder / "results.csv", newline="") as f:
        return [float(r["speedup_vs_sync"]) for r in csv.DictReader(f) if r["mode"] == mode and r["latency"] != "none"]


def agreement(pool: list[float], repeats: int, invocations: int = 5, trials: int = 4000, seed: int = 0) -> float:
    """How often `invocations` invocations of `repeats` repeats (medians of draws from `pool`) agree within 7%."""
    rng = random.Random(seed)
    agree = 0
    for _ in range(trials):
        medians = [statistics.median(rng.choices(pool, k=repeats)) for _ in range(invocations)]
        agree += max(medians) / min(medians) - 1 <= 0.07
    return agree / trials


def noise(folders: list[Path]) -> None:
    print("| mode | sd within an invocation | sd of invocation means | expected from within | P(5 agree within 7%) |")
    print("|---|---|---|---|---|")
    for mode in ("stream", "pipeline", "one-step-off", "fully-async"):
        runs = [per_repeat(f, mode) for f in folders]
        if any(len(r) < 2 for r in runs):
            continue
        level = statistics.mean(x for r in runs for x in r)
        within = statistics.mean(statistics.variance(r) for r in runs) ** 0.5
        between = statistics.stdev(statistics.mean(r) for r in runs) if len(runs) > 1 else float("nan")
        n = statistics.median(len(r) for r in runs)
        pool = [x for r in runs for x in r]
        odds = ", ".join(f"{k} repeats {agreement(pool, k):.2f}" for k in (5, 7, 10, 15, 20))
        print(f"| {mode} | {within / level:.1%} | {between / level:.1%} | {within / n**0.5 / level:.1%} | {odds} |")


def main(argv: list[str]) -> None:
    if argv[0] == "run":
        n, root, options = int(argv[1]), Path(argv[2]), argv[3:]
        folders = [root / f"inv{i + 1}" for i in range(n)]
        for f in folders:
            print(f"{f}: {invoke(f, options):.0f} s", file=sys.stderr)
    else:
        folders = [Path(a) for a in argv[1:]]
    table(folders)
    noise(folders)


if __name__ == "__main__":
    main(sys.argv[1:] or ["run", "5", "bench/repeatability"])
