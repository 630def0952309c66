"""A/B of the engine: a base commit against the work tree, in alternated pairs, on the same machine.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/ab.py --base main --pairs 5
    PYTHONPATH=$PWD .venv/bin/python benchmarks/ab.py --base d2f4879 --steps 14 --set rollout.n=4

Checks the base commit out into a temporary git worktree, then runs `rlrm train --profile P --steps N` (one torch
thread, no validation, no checkpoints) from each side in turn: pair k runs base then new when k is even and new
then base when it is odd, so a machine that speeds up or slows down over time weighs on both sides alike. Each
run's figure is its median `timing_s/step` over the steps after the first (warm-up). Prints every pair's new/base
ratio and their median, which is the number to quote (one pair on a shared machine can be off by 40%), and
whether the two sides' non-timing metrics of the first pair are identical (the must-not-change check of
scripts/same_metrics.py, for one mode). Use it before landing any change to the engine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMING_PREFIXES = ("timing_s/", "cpu_s/", "perf/", "idle/", "reward/latency_")


def run_side(tree: Path, out: Path, args) -> list[dict]:
    """`rlrm train` with the `rlrm` of `tree` (a checkout); the metrics rows."""
    argv = [sys.executable, "-m", "rlrm", "train", "--profile", args.profile, "--steps", str(args.steps)]
    argv += ["--mode", args.mode, "--seed", "0", "--out", str(out), "--console", "none"]
    for item in ["trainer.val_every=0", "trainer.val_before_train=false", "trainer.save_every=0", *args.overrides]:
        argv += ["--set", item]
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    env.setdefault("RLRM_MODELS_DIR", str(ROOT / ".cache" / "models"))
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: the run from {tree} failed:\n{done.stderr[-2000:]}")
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def step_s(rows: list[dict]) -> float:
    """Median seconds a step, the first (warm-up) left out."""
    times = [r["timing_s/step"] for r in rows if "timing_s/step" in r and r.get("step", 0) > 1]
    return statistics.median(times)


def differing_keys(a: list[dict], b: list[dict]) -> list[str]:
    """Non-timing keys whose values differ between two runs' rows, step by step."""
    out = set()
    for row_a, row_b in zip(a, b, strict=False):
        for key in row_a.keys() | row_b.keys():
            if not key.startswith(TIMING_PREFIXES) and not key.endswith("_s") and row_a.get(key) != row_b.get(key):
                out.add(key)
    return sorted(out) + (["(row count)"] if len(a) != len(b) else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="main", help="commit, branch or tag to compare against")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--profile", default="tiny-rule")
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--mode", default="sync")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    if args.pairs < 1 or args.steps < 3:
        raise SystemExit("error: --pairs must be >= 1 and --steps >= 3 (the first step is left out as warm-up)")
    sha = subprocess.run(["git", "rev-parse", args.base], cwd=ROOT, capture_output=True, text=True)
    if sha.returncode != 0:
        raise SystemExit(f"error: {args.base!r} is not a commit of this repository")
    with tempfile.TemporaryDirectory(prefix="rlrm-ab-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), sha.stdout.strip()], cwd=ROOT, check=True)
        try:
            ratios, first = [], None
            for k in range(args.pairs):
                sides = [("base", base), ("new", ROOT)]
                figures = {}
                for name, tree in sides if k % 2 == 0 else sides[::-1]:
                    rows = run_side(tree, Path(tmp) / f"{name}-{k}", args)
                    figures[name] = step_s(rows)
                    if k == 0:
                        first = {**(first or {}), name: rows}
                ratios.append(figures["new"] / figures["base"])
                print(
                    f"pair {k + 1}: base {figures['base']:.3f} s/step, new {figures['new']:.3f} s/step, "
                    f"new/base {ratios[-1]:.3f}",
                    flush=True,
                )
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
    print(f"median new/base step time over {args.pairs} alternated pairs: {statistics.median(ratios):.3f}")
    changed = differing_keys(first["base"], first["new"])
    print("non-timing metrics: identical" if not changed else f"non-timing metrics differ: {', '.join(changed)}")


if __name__ == "__main__":
    main()
