"""Trainer checks before a run starts: colocated placement needs sync mode."""

from __future__ import annotations

import pytest

from rlrm.config.loader import load_profile


def test_colocated_placement_needs_sync_mode():
    from rlrm.errors import ConfigError

    with pytest.raises(ConfigError, match="needs trainer.mode=sync"):
        load_profile(
            "tiny-rule",
            ["trainer.mode=stream", "reward.kind=disrm", "reward.server.model=/m", "reward.placement=colocated"],
        )
