"""Named reward components (rlrm/engine/rewards/components.py) through the reward loop, the rule, the
metrics, the per-component rule agreement and the config checks."""

from __future__ import annotations

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardSample
from tests.unit.engine.rewards.test_reward_components import run, sample


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
