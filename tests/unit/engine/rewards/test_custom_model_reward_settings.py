"""A custom reward that calls model addresses must name the model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rlrm.config.reward import RewardConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))


def test_a_custom_reward_with_addresses_needs_the_model_named(tmp_path):
    path = tmp_path / "f.py"
    path.write_text("def compute_score(*a):\n    return 1.0\n")
    with pytest.raises(ValueError, match="needs reward.server.model"):
        RewardConfig.model_validate(
            {"kind": "custom", "custom": {"path": str(path)}, "server": {"addresses": ["http://127.0.0.1:9/v1"]}}
        )
    # without a model the function runs alone, as before: no servers, both optional arguments None
    assert RewardConfig.model_validate({"kind": "custom", "custom": {"path": str(path)}}).model_kind is None
