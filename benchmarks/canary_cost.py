"""What the reward canaries cost a run: reward-model calls and wall time, with and without, in alternated pairs.

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/canary_cost.py --profile tiny-genrm --steps 20 --pairs 3

Each pair is two `rlrm train` processes of the same profile and seed, one with reward.guard.on_canary=warn and one
with off (which goes first alternates from pair to pair, so drift in a shared machine's load falls on both). Per
run: the wall time of the whole process, the run's reward-model calls (reward/model_calls) and the canaries'
(guard/canary_calls), and the time spent in canary checks (timing_s/canary). The summary gives the canaries'
share of the calls, canaries / (canaries + samples), and the median wall-time difference of the pairs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median


def one_run(profile: str, steps: int, on_canary: str, out: Path, extra: list[str]) -> dict:
    sets = [f"reward.guard.on_canary={on_canary}", *extra]
    argv = [sys.executable, "-m", "rlrm", "train", "--profile", profile, "--steps", str(steps), "--out", str(out)]
    argv += [a for s in sets for a in ("--set", s)]
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {
        "on_canary": on_canary,
        "wall_s": wall,
        "model_calls": sum(r.get("reward/model_calls", 0) for r in rows),
        "canary_calls": sum(r.get("guard/canary_calls", 0) for r in rows),
        "canary_checks": sum("guard/canary_calls" in r for r in rows),
        "canary_s": sum(r.get("timing_s/canary", 0.0) for r in rows),
        "flips": sum(r.get("guard/canary_flips", 0) for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="tiny-genrm")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], help="more overrides for both runs of each pair")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            order = ("warn", "off") if pair % 2 == 0 else ("off", "warn")
            for on_canary in order:
                run = one_run(args.profile, args.steps, on_canary, Path(tmp) / f"{pair}-{on_canary}", args.set)
                results.append({"pair": pair, **run})
                print(json.dumps(results[-1]), flush=True)
    on = [r for r in results if r["on_canary"] == "warn"]
    off = [r for r in results if r["on_canary"] == "off"]
    canary = sum(r["canary_calls"] for r in on) / len(on)
    samples = sum(r["model_calls"] for r in on) / len(on)
    diffs = [a["wall_s"] - b["wall_s"] for a, b in zip(on, off)]
    print(
        f"{args.profile}, {args.steps} steps, {len(on)} pairs: {canary:g} canary calls a run in "
        f"{on[0]['canary_checks']} checks, {samples:g} sample calls: canaries {canary / (canary + samples):.2%} of "
        f"the calls; canary checks {median(r['canary_s'] for r in on):.2f} s a run (median); wall "
        f"{median(r['wall_s'] for r in on):.1f} s on, {median(r['wall_s'] for r in off):.1f} s off (medians), "
        f"paired difference {median(diffs):+.1f} s (median; each pair {', '.join(f'{d:+.1f}' for d in diffs)})"
    )


if __name__ == "__main__":
    main()
