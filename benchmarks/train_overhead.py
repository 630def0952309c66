"""How a `tiny-rule` step spends its time, and the run's peak memory.

    .venv/bin/python benchmarks/train_overhead.py --steps 20

Runs `rlrm train --profile tiny-rule` in a subprocess (so its peak RSS is its own), then reads the
run's metrics.jsonl and prints, over the steps after the first (warm-up):
- the share of step wall time spent in generation and in the update (old log-probs, the actor
  update and the weight sync), and what is left: bookkeeping, rewards, advantages, metrics;
- peak resident memory of the training process (ru_maxrss, as `perf/max_memory_gb`).
Validation and checkpoint steps are excluded (they are periodic work, not per-step overhead).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--profile", default="tiny-rule")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [
            sys.executable,
            "-m",
            "rlrm.cli",
            "train",
            "--profile",
            args.profile,
            "--steps",
            str(args.steps),
            "--out",
            str(run_dir),
            "--console",
            "none",
            "--set",
            "trainer.save_every=0",
            "--set",
            "trainer.val_every=0",
        ]
        for item in args.overrides:
            cmd += ["--set", item]
        subprocess.run(cmd, check=True)
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("step", 0) >= 2]

    def share(*keys):
        return statistics.mean(sum(r.get(f"timing_s/{k}", 0.0) for k in keys) / r["timing_s/step"] for r in rows)

    gen = share("gen")
    update = share("old_log_prob", "ref", "update_actor", "update_weights")
    actor_only = share("update_actor")
    print(
        f"steps measured: {len(rows)} (after warm-up), mean step {statistics.mean(r['timing_s/step'] for r in rows):.3f} s"
    )
    print(f"generation share          {gen:.3f}")
    print(
        f"update share              {update:.3f}  (old log-probs {share('old_log_prob'):.3f}, actor {actor_only:.3f}, weight sync {share('update_weights'):.3f})"
    )
    print(f"rewards share             {share('reward'):.3f}")
    print(f"outside gen + update      {1 - gen - update:.3f}")
    print(f"tokens/s (mean)           {statistics.mean(r['perf/throughput'] for r in rows):,.0f}")
    print(f"peak memory (RSS)         {max(r['perf/max_memory_gb'] for r in rows):.2f} GB")


if __name__ == "__main__":
    main()
