"""actor.ray_address and reward.ray_address: one run joins one Ray, so two different clusters are refused."""

from __future__ import annotations

import pytest

from rlrm.config.loader import load_profile
from rlrm.errors import ConfigError


def test_two_clusters_are_one_line_naming_both_settings():
    sets = ["reward.executor=ray", "reward.ray_address=10.0.0.9:6379", "actor.ray_address=10.0.0.5:6379"]
    with pytest.raises(ConfigError) as caught:  # before the fix: accepted, and reward.ray_address dropped at start
        load_profile("tiny-rule", sets)
    line = str(caught.value)
    assert "actor.ray_address=10.0.0.5:6379 and reward.ray_address=10.0.0.9:6379 name two Ray clusters" in line
    assert line.endswith("set both to the same address") and "\n" not in line


def test_one_cluster_named_once_or_twice_is_taken():
    for sets in (
        ["actor.ray_address=10.0.0.5:6379", "reward.ray_address=10.0.0.5:6379"],
        ["actor.ray_address=10.0.0.5:6379"],
        ["reward.ray_address=auto"],
    ):
        load_profile("tiny-rule", sets)


@pytest.mark.parametrize("named", ["actor.ray_address", "reward.ray_address"])
def test_the_address_one_part_names_is_every_parts(named):
    # reward workers (reward.ray_address None) start before the ranks: they joined a new local Ray, and the ranks,
    # finding Ray up, dropped actor.ray_address without a word
    from rlrm.engine.components import reward_service_config
    from rlrm.engine.served import ray_address

    profile = load_profile("tiny-rule", ["reward.executor=ray", f"{named}=10.0.0.5:6379"])
    assert ray_address(profile) == reward_service_config(profile).ray_address == "10.0.0.5:6379"
