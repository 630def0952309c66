"""How often the live reward-hacking guard flags a healthy run, and how late it finds a real divergence.

    .venv/bin/python benchmarks/guard_false_alarms.py [--runs 200] [--steps 100]

Seeded simulations, no model: the reward rises 0.005 a step (noise sd 0.02); the true rule agreement stays 0.8
(healthy) or falls 0.006 a step from step 30 (hacked), each step's agreement measured on 256 samples (binomial).
Each run feeds the rows to DivergenceGuard (rlrm/engine/metrics/guard.py) at the default window (20) and min_drop,
for confirm_steps 1, 3 and 5: the share of healthy runs flagged, the hacked runs found and the median step found.
"""

from __future__ import annotations

import argparse
import random
import statistics

from rlrm.config.reward_guard import GuardConfig
from rlrm.engine.metrics.guard import DivergenceGuard


def rows(seed: int, steps: int, fall: float, start: int = 30) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for s in range(1, steps + 1):
        truth = 0.8 - fall * max(0, s - start)
        out.append(
            {
                "step": s,
                "critic/score/mean": 0.3 + 0.005 * s + rng.gauss(0, 0.02),
                "reward/rule_agreement": sum(rng.random() < truth for _ in range(256)) / 256,
            }
        )
    return out


def first_flag(run: list[dict], confirm: int) -> int | None:
    guard = DivergenceGuard(GuardConfig(confirm_steps=confirm))
    return next((row["step"] for row in run if guard.observe(row) is not None), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    print("| confirm_steps | healthy runs flagged | hacked runs found | median step found (drift from 30) |")
    print("|---|---|---|---|")
    for confirm in (1, 3, 5):
        healthy = sum(first_flag(rows(seed, args.steps, 0.0), confirm) is not None for seed in range(args.runs))
        found = [f for seed in range(args.runs // 4) if (f := first_flag(rows(seed, args.steps, 0.006), confirm))]
        median = statistics.median(found) if found else float("nan")
        print(f"| {confirm} | {healthy} of {args.runs} | {len(found)} of {args.runs // 4} | {median:g} |")


if __name__ == "__main__":
    main()
