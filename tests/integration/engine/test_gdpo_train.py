"""GDPO in the step and in a training run: the step trains on component-normalised advantages, and a short
tiny-rule run with the components example (examples/rewards/components.py) logs every component."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tests.unit.engine.test_step import completions, step_with
from test_trainer import SMALL

from rlrm.config.loader import load_profile
from rlrm.config.reward import RewardConfig
from rlrm.engine.gdpo import gdpo_advantages
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.metrics.timing import StepTimer
from rlrm.engine.rewards.base import RewardResult
from rlrm.engine.step import GRPOStep, StepSettings
from rlrm.engine.trainer import start_run, train
from rlrm.errors import TrainingError

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "rewards" / "components.py"


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


def test_gdpo_trains_end_to_end_and_logs_every_component(tmp_path, tiny_policy_path):
    profile = load_profile(
        "tiny-rule",
        SMALL
        + [
            "trainer.total_steps=2",
            "trainer.val_every=100",
            "reward.kind=custom",
            f"reward.custom.path={EXAMPLE}",
            "reward.component_weights={correct: 1.0, format: 0.2}",
            "algorithm.component_norm=gdpo",
            "logging.save_samples=true",
        ],
    )
    run_dir = start_run(profile, tmp_path / "gdpo")
    assert train(run_dir).last_step == 2
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] >= 1]
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    for row in rows:
        step_samples = [s for s in samples if s["step"] == row["step"]]
        for name in ("correct", "format"):
            seen = [s["reward_extra_info"]["reward_components"][name] for s in step_samples]
            assert set(seen) <= {0.0, 1.0}
            assert row[f"reward/component/{name}/mean"] == pytest.approx(sum(seen) / len(seen))
            assert 0.0 <= row[f"reward/component/{name}/rule_agreement"] <= 1.0
        assert row["reward/component_errors"] == 0 and row["reward/failures"] == 0
        # the score is the function's weighted sum; the advantages are whitened (token-weighted mean 0, not +-0.7)
        assert row["critic/score/mean"] == pytest.approx(
            row["reward/component/correct/mean"] + 0.2 * row["reward/component/format/mean"]
        )
        assert "actor/pg_loss" in row
