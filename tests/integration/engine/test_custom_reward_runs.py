"""reward.kind: custom (rlrm/engine/rewards/custom.py): a user's function with verl's contract, through the reward loop."""

from __future__ import annotations

import pytest

from rlrm.config.reward import RewardConfig
from tests.unit.engine.rewards.test_custom_reward import score, write


def test_sync_function_with_verl_arguments(tmp_path):
    path = write(
        tmp_path,
        "def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
        "    return {'score': len(solution_str) / 10, 'seen': [data_source, ground_truth, extra_info['k']]}\n",
    )
    result, metrics = score(RewardConfig(kind="custom", custom={"path": str(path)}))
    assert result.score == pytest.approx(1.3) and result.extra["seen"] == ["synthetic", "4", 1]
    assert metrics["reward/failures"] == 0


def test_a_bad_return_is_a_counted_failure_not_a_zero(tmp_path):
    path = write(tmp_path, "def compute_score(*args):\n    return 'yes'\n")
    result, metrics = score(RewardConfig(kind="custom", custom={"path": str(path)}, default_score=-7.0))
    assert result.score == -7.0 and result.extra["reward_failed"] and metrics["reward/defaulted"] == 1
