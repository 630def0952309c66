"""Overlong shaping (rlrm/engine/rewards/overlong.py): hand-computed penalties and the reward loop's accounting."""

from __future__ import annotations

import asyncio
import math

import pytest

from rlrm.config.loader import load_profile
from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardResult, RewardSample
from rlrm.engine.rewards.factory import build_reward_fn
from rlrm.engine.rewards.loop import RewardLoop
from rlrm.engine.rewards.overlong import overlong_penalty
from rlrm.errors import ConfigError

L = 20  # max response length (rollout.max_new_tokens)


B = 4  # buffer_len: the penalty starts past L - B = 16 tokens


@pytest.mark.parametrize(
    ("length", "factor", "expected"),
    [
        (10, 1.0, 0.0),  # well inside: min(-(10-16)/4, 0) = min(1.5, 0) = 0
        (16, 1.0, 0.0),  # exactly expected_len: exceed 0 -> 0 (not -0.0)
        (17, 1.0, -0.25),  # 1 token past: -1/4
        (18, 1.0, -0.5),  # -2/4
        (19, 2.0, -1.5),  # -3/4 * 2
        (20, 1.0, -1.0),  # exactly L: -4/4 = -penalty_factor
        (20, 0.5, -0.5),  # -4/4 * 0.5
        (20, 0.0, 0.0),  # factor 0: never penalised
    ],
)
def test_penalty_matches_hand_computed_values(length, factor, expected):
    penalty = overlong_penalty(length, L, B, factor)
    assert penalty == pytest.approx(expected, abs=1e-12)
    assert math.copysign(1.0, penalty) == (1.0 if expected == 0 else -1.0)  # 0.0, never -0.0, when not penalised


def sample(i: int, length: int | None, answer: str = "#### 3") -> RewardSample:
    return RewardSample(f"p{i}", i, "synthetic", [{"role": "user", "content": "1+2?"}], answer, "3", {}, length)


def overlong_cfg(**over) -> RewardConfig:
    return RewardConfig.model_validate({"overlong": {"buffer_len": B, "penalty_factor": 1.0}, **over})


def test_loop_shapes_once_and_reports_the_mean_and_share():
    cfg = overlong_cfg()
    loop = RewardLoop(build_reward_fn(cfg), cfg, max_response_len=L)
    batch = [sample(0, 12), sample(1, 18), sample(2, 20), sample(3, 20, "#### 4"), sample(4, None)]
    results = asyncio.run(loop.score_all(batch))
    # rule 1, 1, 1, 0, 1; penalties 0, -0.5, -1, -1 and none for the unknown length
    assert [r.score for r in results] == [1.0, 0.5, 0.0, -1.0, 1.0]
    assert [r.extra.get("overlong_penalty") for r in results] == [0.0, -0.5, -1.0, -1.0, None]
    assert [r.extra.get("overlong") for r in results] == [False, True, True, True, None]
    metrics = loop.take_metrics()
    assert metrics["reward/overlong_penalty"] == pytest.approx(-2.5 / 4)
    assert metrics["reward/overlong_frac"] == pytest.approx(3 / 4)


def test_a_retried_sample_is_shaped_once():
    cfg = overlong_cfg(max_retries=2, backoff_s=0.0)
    tries = []

    async def flaky(s: RewardSample) -> RewardResult:
        from rlrm.call_errors import TransientError

        tries.append(s.index)
        if len(tries) < 3:
            raise TransientError("503")
        return RewardResult(1.0)

    loop = RewardLoop(flaky, cfg, max_response_len=L)
    result = asyncio.run(loop.score(sample(0, 20)))
    assert len(tries) == 3 and result.score == 0.0  # 1 - 1, not 1 - 3


@pytest.mark.parametrize("on_failure", ["default", "drop-group"])
def test_a_failed_sample_stays_failed_and_is_not_shaped(on_failure):
    cfg = overlong_cfg(on_failure=on_failure, default_score=0.0, max_retries=0)

    async def broken(s: RewardSample) -> RewardResult:
        if s.index == 0:
            raise ValueError("no answer")
        return RewardResult(1.0)

    loop = RewardLoop(broken, cfg, max_response_len=L)
    failed, scored = asyncio.run(loop.score_all([sample(0, 20), sample(1, 20)]))
    if on_failure == "default":
        assert failed.score == 0.0 and failed.extra["reward_failed"]  # the default score, not 0 - 1
        assert "overlong_penalty" not in failed.extra
    else:
        assert failed is None
    assert scored.score == 0.0 and scored.extra["overlong_penalty"] == -1.0
    metrics = loop.take_metrics()
    assert metrics["reward/failures"] == 1
    # the failed sample is left out of the mean and the share: one shaped sample, penalised by 1
    assert metrics["reward/overlong_penalty"] == -1.0 and metrics["reward/overlong_frac"] == 1.0


def test_no_overlong_section_no_shaping_and_no_metric():
    cfg = RewardConfig()
    loop = RewardLoop(build_reward_fn(cfg), cfg, max_response_len=L)
    assert asyncio.run(loop.score(sample(0, 20))).score == 1.0
    assert "reward/overlong_penalty" not in loop.take_metrics()


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("reward.overlong.buffer_len=20", "reward.overlong.buffer_len (20) must be below rollout.max_new_tokens (20)"),
        ("reward.overlong.buffer_len=0", "reward.overlong.buffer_len: Input should be greater than 0"),
        ("reward.overlong.penalty_factor=-1", "reward.overlong.penalty_factor: Input should be greater than or equal"),
        ("reward.overlong.penalty_factor=nan", "reward.overlong.penalty_factor: Input should be a finite number"),
    ],
)
def test_bad_settings_are_one_clear_line(override, said):
    with pytest.raises(ConfigError) as refused:
        load_profile("tiny-rule", ["reward.overlong.buffer_len=8", override])
    assert said in str(refused.value) and "\n" not in str(refused.value)
