"""Reward components read from rule rewards: metrics, the component table and bad settings."""

from __future__ import annotations

import asyncio

import pytest

from rlrm.config.loader import load_profile
from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.agreement import agreement_metrics
from rlrm.engine.rewards.base import RewardResult, RewardSample
from rlrm.engine.rewards.components import component_metrics, component_table
from rlrm.engine.rewards.factory import build_reward_fn
from rlrm.engine.rewards.loop import RewardLoop
from rlrm.errors import ConfigError, TrainingError


def sample(i: int, response: str = "so #### 4", truth: str = "4") -> RewardSample:
    return RewardSample(f"p{i}", i, "synthetic", [{"role": "user", "content": "q"}], response, truth)


def run(cfg: RewardConfig, samples: list[RewardSample]):
    loop = RewardLoop(build_reward_fn(cfg), cfg)

    async def score_in_order():
        return [await loop.score(s) for s in samples]

    return asyncio.run(score_in_order()), loop.take_metrics()


def test_the_rule_reports_the_components_it_is_asked_for():
    cfg = RewardConfig(component_weights={"correct": 1.0, "format": 0.2})
    results, _ = run(cfg, [sample(0, "#### 4"), sample(1, "#### 5"), sample(2, "no answer")])
    assert [r.extra["reward_components"] for r in results] == [
        {"correct": 1.0, "format": 1.0},
        {"correct": 0.0, "format": 1.0},
        {"correct": 0.0, "format": 0.0},
    ]
    assert [r.score for r in results] == [1.0, 0.0, 0.0]  # the rule's score is unchanged
    (plain,), _ = run(RewardConfig(), [sample(0)])
    assert "reward_components" not in plain.extra  # no weights: nothing new in a rule run


def test_component_metrics_and_their_agreement_with_the_rule():
    cfg = RewardConfig(component_weights={"correct": 1.0, "format": 1.0})
    pairs = [
        (sample(0, "#### 4"), RewardResult(1.0, {"reward_components": {"correct": 1.0, "format": 1.0}})),
        (sample(1, "#### 5"), RewardResult(0.0, {"reward_components": {"correct": 0.0, "format": 1.0}})),
        (sample(2, "none"), RewardResult(0.0, {"reward_components": {"correct": 0.0, "format": 0.0}})),
        (sample(3, "#### 4"), RewardResult(0.0, {"reward_failed": True})),  # left out
    ]
    metrics = component_metrics(r for _, r in pairs)
    assert metrics["reward/component/correct/mean"] == pytest.approx(1 / 3)
    assert metrics["reward/component/format/min"] == 0.0 and metrics["reward/component/format/max"] == 1.0
    agreement = agreement_metrics(cfg, pairs)
    # rule verdicts: right, wrong, wrong. correct agrees 3/3; format (1, 1, 0) agrees on samples 0 and 2: 2/3
    assert agreement["reward/component/correct/rule_agreement"] == 1.0
    assert agreement["reward/component/format/rule_agreement"] == pytest.approx(2 / 3)
    assert "reward/rule_agreement" not in agreement  # the rule itself is still not compared with itself


def test_component_table_fills_failed_samples_with_the_default_score_and_refuses_unreported_ones():
    ok = RewardResult(1.0, {"reward_components": {"a": 1.0, "b": 0.0}})
    failed = RewardResult(-1.0, {"reward_failed": True})
    names, rows, weights = component_table([ok, failed], {}, -1.0)
    assert names == ["a", "b"] and rows == [[1.0, 0.0], [-1.0, -1.0]] and weights == [1.0, 1.0]
    with pytest.raises(TrainingError, match="reported no reward_components while others reported a, b"):
        component_table([ok, RewardResult(1.0, {})], {}, 0.0)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm.component_norm=gdpo2"], "component_norm"),
        (["algorithm.component_norm=gdpo"], "needs reward.component_weights naming the rule's components"),
        (["reward.component_weights={right: 1.0}"], "names right, which the rule does not report"),
        (
            ["reward.component_weights={correct: .inf}"],
            "reward.component_weights.correct: Input should be a finite number",
        ),
        (
            ["algorithm.component_norm=gdpo", "reward.component_weights={correct: 1.0}", "reward.default_score=.nan"],
            "give a finite reward.default_score",
        ),
    ],
)
def test_bad_component_settings_are_one_clear_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_profile("tiny-rule", overrides)
    assert "\n" not in str(info.value)


def test_gdpo_needs_a_reward_with_components():
    with pytest.raises(ConfigError, match="reward.kind=disrm returns one score"):
        load_profile("tiny-disrm", ["algorithm.component_norm=gdpo"])
