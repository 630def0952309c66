"""The reward-loop DisRM scorer: the samples through rlrm's own reward loop and a served DisRM.

    cfg = loop_reward_config(profile.reward, model_path, dtype="fp32", max_length=512)
    out = score_with_loop(samples, cfg)      # LoopScores: float32 scores, errors, seconds

Nothing here re-implements the client: `RewardService` launches the embedded server(s) (or reaches
running ones at `reward.server.addresses`), and the scores come from the DisRM reward function over
`/classify`, through the reward loop's timeouts and retries. A sample the loop cannot score is
given NaN (counted, with its error) instead of a default score, so the comparison reports it and
the verdict fails; it is never silently zeroed.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

import numpy as np

from rlrm.config.reward import RewardConfig
from rlrm.engine.reward_service import RewardService
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.disrm import render_conversation
from rlrm.engine.rewards.invariance import InvarianceSettings, check_invariance
from rlrm.parity.inputs import ParitySample

LOOP_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
WARMUP_SAMPLES = 8


@dataclass
class LoopScores:
    scores: np.ndarray  # [B] float32; NaN where the loop gave no score
    truncated: list[bool]  # the client cut the conversation to reward.disrm.max_length
    seconds: float  # wall time of scoring the batch (servers already up and warm)
    errors: dict[int, str] = field(default_factory=dict)  # sample index -> why it has no score
    invariance: dict | None = None  # rlrm.engine.rewards.invariance.check_invariance on the same server, when asked


def loop_reward_config(
    base: RewardConfig, model: str, dtype: str, max_length: int, addresses: list[str] | tuple = ()
) -> RewardConfig:
    """The profile's reward section turned into a plain DisRM scorer of `model` in `dtype`.

    Latency/failure injection is switched off (it is for scheduling benchmarks, not for numbers),
    and a failed sample becomes NaN (`on_failure=default` with a NaN default) so it is reported. No reward
    cache (every score measured now, and timed; a cache's contract knows nothing of --template) and the
    scoring in this process (Ray workers would load the folder's tokenizer, not --template's).
    """
    raw = base.model_dump()
    # standalone: parity scores while nothing else runs (a colocated server would sleep, and answer 503, throughout)
    raw.update(kind="disrm", on_failure="default", default_score=math.nan, inject={}, placement="standalone")
    raw.update(executor="local")
    raw["cache"]["enabled"] = False
    raw["server"].update(model=model, dtype=LOOP_DTYPES[dtype], addresses=list(addresses))
    raw["disrm"].update(max_length=max_length, too_long="truncate")
    return RewardConfig.model_validate(raw)


def score_with_loop(
    samples: list[ParitySample],
    cfg: RewardConfig,
    tokenizer=None,
    warmup: bool = True,
    repeats: int = 1,
    invariance: bool = False,
) -> LoopScores:
    """Start the reward service, score every sample through its reward loop, stop it again.

    Args:
        tokenizer: the reward model's tokenizer when it must differ from the one in the model folder
            (a chat template supplied with --template); the loop's DisRM client is then built with it.
        warmup: score a few samples first, untimed (first-request setup is not throughput).
        repeats: score the batch this many times and report the fastest (benchmarks); the scores
            are the last pass's.
        invariance: also score the samples one at a time, in batches of 8 and of the server's max,
            right- and left-padded, on the same server (`rlrm.engine.rewards.invariance`).
    """
    return asyncio.run(_score(samples, cfg, tokenizer, warmup, repeats, invariance))


async def _score(
    samples: list[ParitySample], cfg: RewardConfig, tokenizer, warmup: bool, repeats: int, invariance: bool
) -> LoopScores:
    batch = [
        RewardSample(
            uid=s.group_id, index=i, data_source="parity", prompt=s.prompt, solution_str=s.response, ground_truth=""
        )
        for i, s in enumerate(samples)
    ]
    service = RewardService(cfg)
    service.disrm_tokenizer = tokenizer
    try:
        await service.start()
        if warmup:
            await service.loop.score_all(batch[:WARMUP_SAMPLES])
        seconds = math.inf
        for _ in range(max(1, repeats)):
            start = time.perf_counter()
            results = await service.loop.score_all(batch)
            seconds = min(seconds, time.perf_counter() - start)
        checked = await _invariance(service, cfg, samples, tokenizer) if invariance else None
    finally:
        await service.close()
    scores = np.full(len(batch), np.nan, dtype=np.float32)
    errors, truncated = {}, []
    for i, result in enumerate(results):
        extra = result.extra if result is not None else {}
        truncated.append(bool(extra.get("disrm_truncated", False)))
        if result is None or extra.get("reward_failed"):
            errors[i] = str(extra.get("reward_error", "dropped by the reward loop"))
        else:
            scores[i] = np.float32(result.score)
    return LoopScores(scores, truncated, seconds, errors, checked)


async def _invariance(service, cfg: RewardConfig, samples: list[ParitySample], tokenizer) -> dict:
    from transformers import AutoTokenizer

    tok = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(service.model_path)
    limit = cfg.disrm.max_length
    ids = [render_conversation(tok, s.prompt, s.response)[-limit:] for s in samples]
    settings = InvarianceSettings(max_batch=cfg.server.max_batch, dtype=cfg.server.dtype)
    return await check_invariance(
        service.balancer,
        cfg.server.request_model,
        ids,
        [s.group_id for s in samples],
        settings,
        cfg.server.request_timeout_s,
        cfg.server.backend,
    )
