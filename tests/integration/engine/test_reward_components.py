"""Named reward components (rlrm/engine/rewards/components.py) through the reward loop, the rule, the
metrics, the per-component rule agreement and the config checks."""

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


def custom(tmp_path, body: str, **settings) -> RewardConfig:
    path = tmp_path / "fn.py"
    path.write_text("import math\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info):\n" + body)
    return RewardConfig(kind="custom", custom={"path": str(path)}, max_retries=0, **settings)


def test_nested_components_without_a_score_sum_with_their_weights(tmp_path):
    cfg = custom(
        tmp_path,
        "    return {'reward_components': {'correct': 1, 'format': 0.5}, 'note': 'kept'}\n",
        component_weights={"correct": 2.0, "format": -1.0},
    )
    (result,), metrics = run(cfg, [sample(0)])
    assert result.score == pytest.approx(2.0 * 1 - 1.0 * 0.5)
    assert result.extra["reward_components"] == {"correct": 1.0, "format": 0.5} and result.extra["note"] == "kept"
    assert metrics["reward/component_errors"] == 0 and metrics["reward/failures"] == 0


def test_verl_flat_keys_are_read_for_the_named_components(tmp_path):
    # verl's gdpo shape: the components are top-level keys named by gdpo_reward_keys (here: the weights' names)
    cfg = custom(
        tmp_path,
        "    return {'score': 3.0, 'accuracy_reward': 1.0, 'format_reward': 0.0, 'other': 9}\n",
        component_weights={"accuracy_reward": 1.0, "format_reward": 1.0},
    )
    (result,), _ = run(cfg, [sample(0)])
    assert result.score == 3.0  # the function's own score is kept, as in verl
    assert result.extra["reward_components"] == {"accuracy_reward": 1.0, "format_reward": 0.0}


def test_a_missing_component_is_a_counted_failure_not_a_zero(tmp_path):
    cfg = custom(
        tmp_path,
        "    return {'score': 1.0, 'reward_components': {'correct': 1.0}}\n",
        component_weights={"correct": 1.0, "format": 1.0},
        default_score=-5.0,
    )
    (result,), metrics = run(cfg, [sample(0)])
    assert result.score == -5.0 and result.extra["reward_failed"]
    assert "no component format for sample p0" in result.extra["reward_error"]
    assert metrics["reward/component_errors"] == 1 and metrics["reward/defaulted"] == 1


def test_weights_for_a_component_the_function_never_returns_fail_every_sample(tmp_path):
    cfg = custom(tmp_path, "    return 1.0\n", component_weights={"typo": 1.0}, on_failure="fail")
    with pytest.raises(Exception, match="no component typo for sample p0; return every name of reward.component"):
        run(cfg, [sample(0)])


@pytest.mark.parametrize(
    ("value", "counter"), [("float('nan')", "reward/nonfinite"), ("'high'", "reward/component_errors")]
)
def test_a_non_finite_or_non_numeric_component_is_counted(tmp_path, value, counter):
    cfg = custom(tmp_path, f"    return {{'score': 1.0, 'reward_components': {{'correct': {value}}}}}\n")
    (result,), metrics = run(cfg, [sample(0)])
    assert result.extra["reward_failed"] and metrics[counter] == 1 and metrics["reward/defaulted"] == 1


def test_the_first_sample_pins_the_names_when_no_weights_are_given(tmp_path):
    cfg = custom(
        tmp_path,
        "    if extra_info.get('odd'):\n"
        "        return {'score': 0.0, 'reward_components': {'correct': 0.0, 'length': 1.0}}\n"
        "    return {'score': 1.0, 'reward_components': {'correct': 1.0}}\n",
    )
    odd = RewardSample("p1", 1, "synthetic", [], "x", "4", {"odd": True})
    (first, second), metrics = run(cfg, [sample(0), odd])
    assert first.extra["reward_components"] == {"correct": 1.0}
    assert second.extra["reward_failed"] and "length not in the run's set" in second.extra["reward_error"]
    assert metrics["reward/component_errors"] == 1


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
