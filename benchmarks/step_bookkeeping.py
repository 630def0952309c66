"""The per-step work of a tiny-rule step outside the model: process CPU ms of each piece, for a 32 x 8 batch.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 .venv/bin/python benchmarks/step_bookkeeping.py
    PYTHONPATH=/path/to/other/checkout OMP_NUM_THREADS=1 .venv/bin/python benchmarks/step_bookkeeping.py  # its rlrm

Times `collate` (old_log_prob phase), `token_level_rewards` (adv phase), `TraceStream.append` of one step's spans
(256 concurrent generate requests, 256 reward calls, the trainer's phases) and `RewardLoop.score_all` of 256 rule
samples through the reward function the trainer builds (reward phase). Each figure is the median over 7 rounds of
the mean of 20 calls, in process CPU time, so it depends little on other jobs; the whole-step A/B is
`benchmarks/ab.py`. Samples are random (seed 0) with tiny-rule's shape: prompts of 38-45 tokens, responses of 8-20.
A piece the checkout does not have is skipped.
"""

from __future__ import annotations

import asyncio
import gc
import random
import statistics
import tempfile
import time
from pathlib import Path

ROWS, N = 256, 8


def cpu_ms(fn, rounds: int = 7, calls: int = 20) -> float:
    """Median over `rounds` of the mean process CPU ms of `calls` calls of `fn`."""
    fn()  # warm-up
    out = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            fn()
        out.append((time.process_time() - start) / calls * 1e3)
    return statistics.median(out)


def completions(rng: random.Random) -> list:
    from rlrm.inference.base import Completion

    out = []
    for _ in range(ROWS // N):
        prompt = [rng.randrange(3, 450) for _ in range(rng.randrange(38, 46))]
        for _ in range(N):
            r = rng.randrange(8, 21)
            ids, lps = [rng.randrange(3, 450) for _ in range(r)], [-rng.random() for _ in range(r)]
            out.append(Completion(prompt, ids, lps, "stop", policy_version=1))
    return out


def step_spans(step: int) -> list:
    """One step's spans as a sync step records them, the step starting at `step` seconds."""
    from rlrm.engine.metrics.timing import Span

    t = float(step)
    spans = [Span("generate", "generate", t + i * 1e-5, t + 0.15 + (i % 7) * 1e-3) for i in range(ROWS)]
    spans += [Span("reward", "reward", t + 0.16 + i * 2e-5, t + 0.16 + i * 2e-5 + 1e-5) for i in range(ROWS)]
    phases = [("gen", 0.0, 0.16), ("reward", 0.16, 0.17), ("old_log_prob", 0.17, 0.18), ("update_actor", 0.18, 0.6)]
    return spans + [Span("trainer", name, t + a, t + b) for name, a, b in phases]


def main() -> None:
    import torch

    from rlrm.config.loader import load_profile
    from rlrm.engine.actor.batch import collate
    from rlrm.engine.metrics.trace import TraceStream
    from rlrm.engine.rewards.base import RewardResult, RewardSample
    from rlrm.engine.rewards.factory import build_reward_fn
    from rlrm.engine.rewards.loop import RewardLoop

    torch.set_num_threads(1)
    rng = random.Random(0)
    batch_of = completions(rng)
    steps = [step_spans(k) for k in range(1 + 7 * 20)]  # one per call of cpu_ms
    profile = load_profile("tiny-rule")
    # what is made so far lives as long as the run: frozen out of garbage collection, as `rlrm train` freezes it
    gc.collect()
    gc.freeze()
    print(f"collate                 {cpu_ms(lambda: collate(batch_of, 0)):.3f} ms")
    try:
        from rlrm.engine.turn_rewards import token_level_rewards
    except ImportError:
        print("token_level_rewards     (not in this checkout)")
    else:
        batch = collate(batch_of, 0)
        results = [RewardResult(float(rng.random() < 0.2)) for _ in range(ROWS)]
        print(f"token_level_rewards     {cpu_ms(lambda: token_level_rewards(batch, results)):.3f} ms")
    with tempfile.TemporaryDirectory() as tmp:
        stream, taken = TraceStream(Path(tmp) / "trace.json", origin_s=0.0), iter(steps)
        print(f"TraceStream.append      {cpu_ms(lambda: stream.append(next(taken))):.3f} ms")
        stream.close()
    loop = RewardLoop(build_reward_fn(profile.reward), profile.reward)
    samples = [
        RewardSample(f"p{i // N}", i, "synthetic", [{"role": "user", "content": "1 + 2?"}], f"#### {i % 5}", "3")
        for i in range(ROWS)
    ]

    async def score_steps() -> float:  # every step in one running loop, as the trainer awaits them
        out = []
        for _ in range(1 + 7):
            start = time.process_time()
            for _ in range(20):
                await loop.score_all(samples)
                loop.take_metrics()  # the step's counters, taken as every mode takes them
            out.append((time.process_time() - start) / 20 * 1e3)
        return statistics.median(out[1:])  # the first round warms up

    print(f"RewardLoop.score_all    {asyncio.run(score_steps()):.3f} ms")


if __name__ == "__main__":
    main()
