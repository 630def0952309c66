"""RAY_ADDRESS, which a part without a ray_address joins, is checked before a run starts as the settings are."""

from __future__ import annotations

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.run_checks import check_ray_heads
from rlrm.errors import ConfigError

pytest.importorskip("ray")


def test_a_ray_address_that_is_no_ray_address_is_one_line_naming_it(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "http://10.0.0.5:8265")  # the dashboard's, which `ray job submit` takes
    with pytest.raises(ConfigError, match=r"^RAY_ADDRESS: 'http://10.0.0.5:8265' is not a Ray address.*unset RAY_ADD"):
        check_ray_heads(load_profile("tiny-rule", ["reward.executor=ray"]))


def test_ray_address_is_not_read_when_every_part_names_its_cluster(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "http://10.0.0.5:8265")
    sets = ["reward.executor=ray", "reward.ray_address=auto", "actor.ray_address=auto"]
    check_ray_heads(load_profile("tiny-rule", sets))
    check_ray_heads(load_profile("tiny-rule"))  # no part uses Ray
