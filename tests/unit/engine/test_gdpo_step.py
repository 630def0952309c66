"""A GRPO step on GDPO advantages of the reward components, and a step without components refused."""

from __future__ import annotations

import pytest
import torch

from rlrm.config.reward import RewardConfig
from rlrm.engine.gdpo import gdpo_advantages
from rlrm.engine.metrics.timing import StepTimer
from rlrm.engine.rewards.base import RewardResult
from rlrm.engine.step import GRPOStep, StepSettings
from rlrm.errors import TrainingError
from tests.unit.engine.test_step import completions, step_with


def gdpo_step(model, weights: dict) -> GRPOStep:
    grpo = step_with(model)
    reward = RewardConfig(component_weights=weights, default_score=-1.0)
    grpo.settings = StepSettings(**{**grpo.settings.__dict__, "component_norm": "gdpo", "reward": reward})
    return grpo


def with_components(*rows):
    return [
        RewardResult(-1.0, {"reward_failed": True})
        if row is None
        else RewardResult(sum(row), {"reward_components": {"correct": row[0], "format": row[1]}})
        for row in rows
    ]


def test_the_step_trains_on_gdpo_advantages_of_the_components(model):
    grpo = gdpo_step(model, {"correct": 1.0, "format": 0.5})
    batch, _ = grpo.prepare(completions(), off_policy=False, timer=StepTimer())  # response lengths 2 3 1 4 2 2
    res = with_components((1, 1), (0, 1), (0, 1), (0, 0), (1, 0), None)  # the last one failed and was defaulted
    scored = grpo.score(batch, res, StepTimer())
    table = torch.tensor([[1, 1], [0, 1], [0, 1], [0, 0], [1, 0], [-1, -1]], dtype=torch.float32)
    expected = gdpo_advantages(table, [1.0, 0.5], [0, 0, 1, 1, 2, 2], torch.tensor([2, 3, 1, 4, 2, 2]))
    assert scored.batch.advantages.tolist() == pytest.approx(expected.tolist(), abs=1e-6)
    assert scored.batch.scores.tolist() == [2.0, 1.0, 1.0, 0.0, 1.0, -1.0]  # the logged score is the reward's own
    # GRPO on the same scores gives other advantages (groups 1 and 2 differ only by the half-weighted format)
    plain = step_with(model).score(batch, res, StepTimer())
    assert plain.batch.advantages.tolist() != pytest.approx(expected.tolist(), abs=1e-3)


def test_a_step_without_components_stops_with_one_line(model):
    grpo = gdpo_step(model, {})
    batch, _ = grpo.prepare(completions(), off_policy=False, timer=StepTimer())
    with pytest.raises(TrainingError, match="no sample of the step reported reward components"):
        grpo.score(batch, [RewardResult(1.0)] * 6, StepTimer())


@pytest.mark.parametrize("value", [float("nan"), "high"])
def test_a_step_whose_components_all_failed_names_the_failure_not_missing_components(model, value):
    # components without weights, every one NaN (or not a number): each sample is a counted failure, defaulted;
    # the step must say that, not that no sample reported components
    from rlrm.engine.rewards.components import ComponentSpec

    with pytest.raises(Exception) as failed:
        ComponentSpec({}).read({"reward_components": {"correct": value}}, "compute_score", "p0")
    error = str(failed.value)
    grpo = gdpo_step(model, {})
    batch, _ = grpo.prepare(completions(), off_policy=False, timer=StepTimer())
    results = [RewardResult(-1.0, {"reward_failed": True, "reward_error": error}) for _ in range(6)]
    with pytest.raises(TrainingError) as stopped:
        grpo.score(batch, results, StepTimer())
    message = str(stopped.value)
    assert "6 of 6 samples failed their reward" in message and error in message, message
    assert "component correct" in error and "\n" not in message
