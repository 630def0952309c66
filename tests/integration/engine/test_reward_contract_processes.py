"""The reward contract's fingerprint is the same in another Python process (rlrm/engine/rewards/contract.py)."""

from __future__ import annotations

import subprocess
import sys

from tests.unit.engine.rewards.test_reward_contract import contract


def test_the_fingerprint_is_stable_across_processes():
    code = (
        "from rlrm.config.reward import RewardConfig; from rlrm.engine.rewards.contract import reward_contract; "
        "print(reward_contract(RewardConfig(kind='genrm', server={'model': 'judge'}), "
        "{'name': 'judge', 'path': '/m', 'weights': 'sha256:0'}).fingerprint)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == contract().fingerprint and len(out) == 64
    assert contract().short == out[:12]
