"""How often a GenRM run asks its judge the same question, and what the reward cache saves.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/reward_cache.py --steps 10
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/reward_cache.py --steps 10 --compare --pairs 2

Runs `rlrm train --profile tiny-genrm` (subprocesses; samples.jsonl on, no validation or checkpoints) with the
reward cache on (the profile's default: reward.cache.enabled=auto) and prints, per step, from samples.jsonl
and metrics.jsonl:
- samples, distinct (prompt, response) pairs among them, and pairs already judged at an earlier step;
- reward/cache_hits and misses (hit rate), the judge calls really made (reward/model_calls) and the calls
  saved (reward/cache_saved_model_calls): a repeat inside a step waits for the first of its kind;
and the run's totals. With --compare, alternated pairs of runs with the cache on and off (same seed, same
samples up to the judge's scores) and the mean step time of each, steps 2 on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path


def train(run_dir: Path, steps: int, seed: int, cache: bool, overrides: list[str]) -> None:
    cmd = [sys.executable, "-m", "rlrm.cli", "train", "--profile", "tiny-genrm", "--steps", str(steps)]
    cmd += ["--out", str(run_dir), "--console", "none", "--seed", str(seed)]
    sets = ["trainer.save_every=0", "trainer.val_every=0", "trainer.val_before_train=false"]
    sets += ["logging.save_samples=true", f"reward.cache.enabled={'auto' if cache else 'false'}", *overrides]
    for item in sets:
        cmd += ["--set", item]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def per_step(run_dir: Path) -> list[dict]:
    rows = {r["step"]: r for r in read_jsonl(run_dir / "metrics.jsonl") if r.get("step", 0) > 0}
    by_step = defaultdict(list)
    for s in read_jsonl(run_dir / "samples.jsonl"):
        by_step[s["step"]].append((json.dumps(s["prompt"], sort_keys=True), s["response"], s["ground_truth"]))
    seen: set = set()
    out = []
    for step in sorted(rows):
        pairs = by_step[step]
        distinct = set(pairs)
        r = rows[step]
        out.append(
            {
                "step": step,
                "samples": len(pairs),
                "distinct": len(distinct),
                "seen_before": len(distinct & seen),
                "hits": r.get("reward/cache_hits", 0),
                "misses": r.get("reward/cache_misses", 0),
                "judge_calls": r.get("reward/model_calls", 0),
                "saved_calls": r.get("reward/cache_saved_model_calls", 0),
                "step_s": r["timing_s/step"],
            }
        )
        seen |= distinct
    return out


def print_table(rows: list[dict]) -> None:
    print("step  samples  distinct  seen-before  hits  misses  hit-rate  judge-calls  saved")
    for r in rows:
        rate = r["hits"] / max(1, r["hits"] + r["misses"])
        print(
            f"{r['step']:>4}  {r['samples']:>7}  {r['distinct']:>8}  {r['seen_before']:>11}  {r['hits']:>4}  "
            f"{r['misses']:>6}  {rate:>8.3f}  {r['judge_calls']:>11}  {r['saved_calls']:>5}"
        )
    samples, hits = sum(r["samples"] for r in rows), sum(r["hits"] for r in rows)
    calls, saved = sum(r["judge_calls"] for r in rows), sum(r["saved_calls"] for r in rows)
    print(
        f"run: {samples} samples, {hits} from the cache (hit rate {hits / max(1, samples):.3f}); "
        f"{calls} judge calls made, {saved} saved ({saved / max(1, calls + saved):.3f} of {calls + saved})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compare", action="store_true", help="also time alternated runs with the cache off")
    parser.add_argument("--pairs", type=int, default=1, help="with --compare: on/off pairs, order alternated")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "cached"
        train(run, args.steps, args.seed, True, args.overrides)
        rows = per_step(run)
        print_table(rows)
        if not args.compare:
            return
        times: dict[str, list[float]] = {"on": [], "off": []}
        calls: dict[str, list[int]] = {"on": [], "off": []}
        for i in range(args.pairs):
            order = ("off", "on") if i % 2 == 0 else ("on", "off")
            for which in order:
                out = Path(tmp) / f"{which}-{i}"
                train(out, args.steps, args.seed, which == "on", args.overrides)
                steps = per_step(out)
                times[which].append(statistics.mean(r["step_s"] for r in steps[1:]))
                calls[which].append(sum(r["judge_calls"] for r in steps))
        for which in ("on", "off"):
            print(
                f"cache {which}: mean step {statistics.mean(times[which]):.3f} s (steps 2-{args.steps}, runs "
                f"{', '.join(f'{t:.3f}' for t in times[which])}); judge calls per run {calls[which]}"
            )


if __name__ == "__main__":
    main()
