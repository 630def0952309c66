"""Score samples with a profile's reward as training does: the same reward service, servers, reward
function and loop (its workers, concurrency, retries, a hosted judge's rate limits), with a failed
sample kept visible as NaN instead of `reward.default_score`.

    scored = score_samples(profile.reward, samples)       # servers started and stopped here
    scored.results, scored.metrics["reward/model_calls"]

Used by `rlrm eval rm` (pairs.py) and `rlrm audit reward` (audit.py).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Callable

from rlrm.config.reward import RewardConfig
from rlrm.engine.reward_service import RewardService
from rlrm.engine.rewards.base import RewardResult, RewardSample


@dataclass
class Scored:
    results: list[RewardResult | None]  # in the order of the samples; a failed one has extra["reward_failed"]
    metrics: dict[str, float]  # the loop's reward/* counters over these samples (calls, tokens, cost, waits)


def eval_config(reward: RewardConfig) -> RewardConfig:
    """The profile's reward without injection, and a failed sample kept as NaN (counted) rather than a default."""
    raw = reward.model_dump()
    raw.update(inject={}, on_failure="default", default_score=math.nan, max_failure_rate=1.0)
    raw["disrm"]["scorer"] = "served"
    return RewardConfig.model_validate(raw)


def score_samples(
    reward: RewardConfig,
    samples: list[RewardSample],
    max_response_len: int | None = None,
    on_ready: Callable[[], None] | None = None,
) -> Scored:
    """Every sample scored at once through the reward loop (servers started here and stopped in `finally`).

    Args:
        max_response_len: the rollout's max_new_tokens, for reward.overlong (as the trainer passes it).
        on_ready: called once the servers answer, before the first sample is sent (say what it will cost).
    """
    return asyncio.run(_score(eval_config(reward), samples, max_response_len, on_ready))


async def _score(cfg: RewardConfig, samples: list[RewardSample], max_response_len: int | None, on_ready) -> Scored:
    service = RewardService(cfg, max_response_len=max_response_len)
    try:
        await service.start()
        if on_ready is not None:
            on_ready()
        await service.wake()
        results = await service.loop.score_all(samples)
        return Scored(results, service.loop.take_metrics())
    finally:
        await service.close()
