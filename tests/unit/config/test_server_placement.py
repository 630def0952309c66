"""`<section>.launch_on: ray` and the keys that place server replicas on Ray nodes: bad values are one clear line."""

from __future__ import annotations

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.processes import planned_processes
from rlrm.errors import ConfigError

RAY = ["rollout.backend=server", "rollout.server.launch_on=ray"]


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (
            [*RAY, "rollout.server.node_resource=node:gpu-box"],
            r"rollout\.server\.node_resource: 'node:gpu-box' is not node:<IP> \(Ray names each node's own resource by its IP",
        ),
        (
            [*RAY, "rollout.server.node_resource=CPU"],
            r"rollout\.server\.node_resource: 'CPU' does not pick nodes; name a custom Ray resource .*ray start --resources=",
        ),
        (
            ["reward.server.node_resource=reward_host"],
            r"reward\.server\.node_resource places replicas with Ray: set reward\.server\.launch_on=ray too",
        ),
        (
            [*RAY, "rollout.server.addresses=http://10.0.0.2:8000"],
            r"rollout\.server\.launch_on=ray launches replicas, but rollout\.server\.addresses names running servers",
        ),
        ([*RAY, "rollout.server.gpu_ids=[0]"], r"rollout\.server\.gpu_ids is for local replicas; .*gpus_per_replica"),
        ([*RAY, "rollout.server.placement=SPREAD_OUT"], r"rollout\.server\.placement: Input should be 'PACK'"),
    ],
)
def test_bad_placement_is_one_line_naming_the_key(overrides, needle):
    with pytest.raises(ConfigError, match=needle) as info:
        load_profile("tiny-disrm", overrides)
    assert "\n" not in str(info.value)


def test_dry_run_says_where_each_fleet_goes():
    profile = load_profile(
        "tiny-disrm",
        [
            *RAY,
            "rollout.server.node_resource=rollout_host",
            "reward.server.launch_on=ray",
            "reward.server.node_resource=node:10.0.0.3",
            "reward.server.placement=STRICT_SPREAD",
        ],
    )
    lines = planned_processes(profile)
    assert (
        "# rollout.server: 1 replica on Ray nodes: one placement-group bundle {'CPU': 1.0, 'rollout_host': 1.0} "
        "per replica, strategy PACK" in "\n".join(lines)
    )
    assert any(
        x.startswith(
            "# reward.server: 1 replica on Ray nodes: one placement-group bundle {'CPU': 1.0, "
            "'node:10.0.0.3': 1.0} per replica, strategy STRICT_SPREAD"
        )
        for x in lines
    )
    # the replica binds the IP of the node Ray places it on
    assert any(x.startswith("# rollout.server replica 0:") and "--host NODE_IP" in x for x in lines)
    local = planned_processes(load_profile("tiny-disrm", ["rollout.backend=server"]))
    assert not any("Ray nodes" in x for x in local) and any("--host 127.0.0.1" in x for x in local)


def test_each_server_section_hands_its_fleet_only_its_own_settings():
    import dataclasses

    from rlrm.config.reward import RewardServerConfig
    from rlrm.config.servers import RolloutServerConfig
    from rlrm.launch.fleet.server_fleet import ServerFleet
    from rlrm.launch.fleet.spec import Batching

    policy = RolloutServerConfig(batch_wait_ms=7, batch_gap_ms=2, weight_sync="distributed", sync_timeout_s=42)
    spec = policy.fleet_spec()
    assert spec.section == "rollout.server" and spec.batching == Batching(7, 2) and spec.model is None
    flags = ["--batch-wait-ms", "7", "--batch-gap-ms", "2", "--weight-sync-timeout-s", "42"]
    assert ServerFleet(spec, role="policy", model_path="m").extra_args() == flags
    reward = RewardServerConfig(model="judge", extra_args=["--x"], batch_wait_ms=9).fleet_spec()
    assert reward.section == "reward.server" and reward.batching == Batching(9, 5) and reward.model == "judge"
    assert reward.weight_sync == "disk" and reward.sync_timeout_s is None  # a policy's own
    # a judge's requests arrive one by one too: its batch window; no weight flags
    judge = ["--batch-wait-ms", "9", "--batch-gap-ms", "5", "--x"]
    assert ServerFleet(reward, role="genrm", model_path="judge").extra_args() == judge
    assert ServerFleet(reward, role="disrm", model_path="rm").extra_args() == ["--x"]  # /classify: no window
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.replicas = 2


@pytest.mark.parametrize(
    "flag", [["--api_key", "k"], ["--api_key=k"], ["--API-KEY=k"], ["--api-k", "k"], ["--admin", "k"]]
)
def test_a_key_flag_in_any_spelling_the_engines_read_is_refused(flag):
    # vLLM's parser reads --api_key as --api-key, argparse an unambiguous prefix: the key landed on the command line
    from pydantic import ValidationError

    from rlrm.config.servers import RolloutServerConfig

    with pytest.raises(ValidationError, match="passes a key on the servers' command line"):
        RolloutServerConfig(backend="vllm", extra_args=flag)
    RolloutServerConfig(backend="vllm", extra_args=["--api-server-count", "2", "--max-num-seqs=8"])
