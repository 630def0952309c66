"""Reward-loop overhead per sample for a zero-latency rule reward.

    .venv/bin/python benchmarks/reward_loop_overhead.py [--samples 20000]

Scores the same samples (a) by calling the GSM8K rule function directly, one after another, and
(b) through `RewardLoop.score_all` (workers, timeout, retry bookkeeping, counters). The overhead
per sample is (b - a) / samples.
"""

from __future__ import annotations

import argparse
import asyncio
import time


def main() -> None:
    from rlrm.config.reward import RewardConfig
    from rlrm.engine.rewards.base import RewardSample
    from rlrm.engine.rewards.loop import RewardLoop
    from rlrm.engine.rewards.rule import make_rule_reward

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=20000)
    args = parser.parse_args()
    cfg = RewardConfig()
    fn = make_rule_reward(cfg)
    samples = [
        RewardSample(
            uid=f"p{i // 8}",
            index=i,
            data_source="synthetic/arith",
            prompt=[{"role": "user", "content": "q"}],
            solution_str=f"{i} + 1 = {i + 1}\n#### {i + 1}",
            ground_truth=str(i + 1),
        )
        for i in range(args.samples)
    ]

    async def direct():
        for s in samples:
            await fn(s)

    async def through_loop():
        await RewardLoop(fn, cfg).score_all(samples)

    for _ in range(2):  # second round is the measured one (warm)
        start = time.perf_counter()
        asyncio.run(direct())
        direct_s = time.perf_counter() - start
        start = time.perf_counter()
        asyncio.run(through_loop())
        loop_s = time.perf_counter() - start
    per_sample_ms = 1000 * (loop_s - direct_s) / args.samples
    print(f"{args.samples} samples: direct {direct_s:.3f} s, reward loop {loop_s:.3f} s")
    print(f"reward-loop overhead per sample   {per_sample_ms:.4f} ms")


if __name__ == "__main__":
    main()
