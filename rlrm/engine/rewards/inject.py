"""Latency and failure injection for any reward function (`reward.inject`).

Used to see how much reward latency each scheduling mode hides, and how the reward loop copes
with flaky scorers, without a slow or flaky server:

    fn = inject(make_rule_reward(cfg), cfg.inject)     # build_reward_fn does this when inject is active

The latency specs themselves (grammar, distributions, trace files) are `rlrm.config.latency`.

The wrapper sleeps (asynchronously) for a drawn latency, then fails with `reward.inject.fail_rate`
(an `InjectedFailure`, retried like a 5xx), else calls the wrapped function. Draws depend only on
the seed, the sample and how often that sample was drawn, so a run repeats itself whatever order
samples arrive in.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from rlrm.config.latency import is_number
from rlrm.config.reward import InjectConfig
from rlrm.engine.rewards.base import RewardFn, RewardResult, RewardSample
from rlrm.engine.rewards.errors import InjectedFailure


def inject(fn: RewardFn, cfg: InjectConfig) -> RewardFn:
    """Wrap a reward function with `cfg`'s latency and failures.

    Each call draws from `random.Random(f"{seed}:{uid}:{index}:{k}")`, k counting the earlier draws
    for that (uid, index): one latency (slept with asyncio.sleep, so the event loop keeps running),
    then a failure with probability `fail_rate` (InjectedFailure, retryable). A success carries
    `injected_latency_s` in its extra.

    Args:
        fn: any async reward function.
        cfg: the `reward.inject` section.

    Returns:
        The wrapped function, named `injected(<fn's name>)`.
    """
    dist, fail_rate, seed = cfg.latency_dist(), cfg.fail_rate, cfg.seed
    draws: dict[tuple[str, int], int] = {}  # (uid, index) -> draws so far (grows with the run, a few ints per sample)

    async def injected(sample: RewardSample) -> RewardResult:
        key = (sample.uid, sample.index)
        k = draws.get(key, 0)
        draws[key] = k + 1
        rng = random.Random(f"{seed}:{sample.uid}:{sample.index}:{k}")
        latency_s = dist.sample(rng) if dist is not None else 0.0
        failed = rng.random() < fail_rate
        if latency_s > 0:
            await asyncio.sleep(latency_s)
        if failed:
            raise InjectedFailure(
                f"injected failure (reward.inject.fail_rate={fail_rate:g}) for sample {sample.uid} attempt {k + 1}"
            )
        return _with_latency(await fn(sample), latency_s)

    name = getattr(fn, "__name__", type(fn).__name__)
    injected.__name__ = injected.__qualname__ = f"injected({name})"
    return injected


def _with_latency(raw: Any, latency_s: float) -> Any:
    """The wrapped function's result with `injected_latency_s` added (a new object; other shapes left to the loop's check)."""
    if isinstance(raw, RewardResult):
        return RewardResult(raw.score, {**raw.extra, "injected_latency_s": latency_s})
    if isinstance(raw, dict) and "score" in raw:
        return {**raw, "injected_latency_s": latency_s}
    if is_number(raw):
        return RewardResult(raw, {"injected_latency_s": latency_s})
    return raw
