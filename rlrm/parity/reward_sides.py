"""One side of `rlrm parity reward`: a reward section, scored through rlrm's own reward service.

    side = RewardSide("B", "tiny-genrm with --b-set reward.genrm.template", profile.reward, max_response_len=64)
    check_references(side, samples)       # a judge or rule that compares with the reference needs one per sample
    scored = score_side(side, samples)    # servers started (or reached) and stopped here; SideScores

The servers, the reward function and the reward loop are the ones `rlrm train` starts (`RewardService`), so a
side's numbers are what training would get, with three changes that make each outcome visible rather than change
it (`side_config`): latency/failure injection is off, a failed sample is kept as NaN with its error (never scored
`reward.default_score`, counted per side), and the reward cache is off, so that each side asks its own reward
(a shared cache would hand side B side A's scores when the contracts are equal).
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
from rlrm.engine.rewards.contract import RewardContract, reward_contract
from rlrm.errors import DataError, RlrmError
from rlrm.parity.inputs import ParitySample

# the loop's counters a user reads per side: what the judge was asked and what it cost
JUDGE_METRICS = {
    "calls": "reward/model_calls",
    "prompt_tokens": "reward/judge_prompt_tokens",
    "completion_tokens": "reward/judge_completion_tokens",
    "cost": "reward/cost",
    "retries": "reward/retries",
    "timeouts": "reward/timeouts",
    "unparsed": "reward/unparsed",
    "rate_limited": "reward/rate_limited",
}


class ParitySideError(RlrmError):
    """A side of a reward parity run cannot give scores (its servers do not start, it fails every sample)."""


@dataclass(frozen=True)
class RewardSide:
    name: str  # "A" or "B"
    origin: str  # where its reward section came from, as the user gave it (keys only, never values)
    reward: RewardConfig  # the section as given; `side_config` is applied when it is scored
    max_response_len: int | None = None  # the rollout's max_new_tokens, for reward.overlong (as training passes it)
    seed: int = 0

    @property
    def label(self) -> str:
        return f"side {self.name} ({self.origin})"


@dataclass
class SideScores:
    scores: np.ndarray  # [B] float64; NaN where the side gave no score
    errors: dict[int, str]  # sample index -> why it has no score
    contract: RewardContract
    metrics: dict[str, float]  # the reward loop's reward/* counters over these samples
    seconds: float  # wall time of the scoring (servers already up)
    model: str | None = None  # reward.server.model (None for a rule)
    judge: dict = field(default_factory=dict)  # JUDGE_METRICS' values

    @property
    def failures(self) -> int:
        return int((~np.isfinite(self.scores)).sum())


def side_config(reward: RewardConfig) -> RewardConfig:
    """The section with injection off, failures kept as NaN (counted, never a default score) and no reward cache."""
    raw = reward.model_dump()
    raw.update(inject={}, on_failure="default", default_score=math.nan, max_failure_rate=1.0)
    raw["cache"]["enabled"] = False
    return RewardConfig.model_validate(raw)


def check_references(side: RewardSide, samples: list[ParitySample]) -> None:
    """Refuse samples without a reference answer when the side's reward compares with one (a rule, or a judge
    template that shows {reference}): scoring them would judge against an empty answer, not measure parity."""
    uses = reward_contract(side.reward).parts["reference"]
    why = "compares with" if uses["rule_compares"] else "shows its judge" if uses["judge_sees"] else None
    missing = sum(s.reference is None for s in samples)
    if why and missing:
        raise DataError(
            f"{side.label}: its reward {why} the reference answer, but {missing} of {len(samples)} samples carry "
            "none: give each --input row a `reference` field (or generate the samples from a profile's data)"
        )


def to_reward_samples(samples: list[ParitySample]) -> list[RewardSample]:
    """What the reward function sees of each sample, as training builds it (rlrm.engine.scheduling.requests)."""
    return [
        RewardSample(
            uid=s.group_id,
            index=i,
            data_source=s.data_source,
            prompt=s.prompt,
            solution_str=s.response,
            ground_truth=s.reference or "",
            extra_info=dict(s.extra_info or {}),
            response_length=s.response_tokens,
        )
        for i, s in enumerate(samples)
    ]


def score_side(side: RewardSide, samples: list[ParitySample]) -> SideScores:
    """Start the side's reward service, score every sample once, stop it; refuse a side that scored none."""
    try:
        scored = asyncio.run(_score(side, to_reward_samples(samples)))
    except RlrmError as exc:
        raise ParitySideError(f"{side.label}: {str(exc).strip().splitlines()[0]}") from None
    if scored.failures == len(samples):
        first = next(iter(scored.errors.values()), "no score")
        raise ParitySideError(
            f"{side.label} scored none of the {len(samples)} samples (first error: {first}); "
            "check its reward settings with `rlrm inspect reward` before comparing"
        )
    return scored


async def _score(side: RewardSide, batch: list[RewardSample]) -> SideScores:
    cfg = side_config(side.reward)
    service = RewardService(cfg, seed=side.seed, max_response_len=side.max_response_len)
    try:
        await service.start()
        await service.wake()
        start = time.perf_counter()
        results = await service.loop.score_all(batch)
        seconds = time.perf_counter() - start
        metrics = service.loop.take_metrics()
        contract = service.contract
    finally:
        await service.close()
    if contract is None:  # start() sets it before the loop exists
        raise RuntimeError("the reward service started without a reward contract")
    scores = np.full(len(batch), np.nan)
    errors = {}
    for i, result in enumerate(results):
        if result is None or result.extra.get("reward_failed") or not math.isfinite(result.score):
            errors[i] = str(result.extra.get("reward_error", "no score")) if result else "dropped by the reward loop"
        else:
            scores[i] = float(result.score)
    judge = {name: metrics.get(key, 0.0) for name, key in JUDGE_METRICS.items()}
    model = cfg.server.model if cfg.model_kind else None
    return SideScores(scores, errors, contract, metrics, seconds, model, judge)
