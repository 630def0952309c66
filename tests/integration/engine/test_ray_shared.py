"""One Ray shared by the parts of a run (rlrm/launch/common/ray_init.py): the part that started it does not stop it
under the others, and a driver run by `ray job submit` (RAY_ADDRESS set) joins the job's cluster."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys

import pytest

from rlrm.config.loader import load_profile
from rlrm.config.reward import RewardConfig
from rlrm.engine.reward_service import RewardService
from rlrm.engine.served import fleet_spec
from rlrm.launch.fleet.pool import ServerPool
from rlrm.launch.fleet.ray_replicas import RayReplicas
from rlrm.launch.fleet.server_fleet import ServerFleet, fleet_key

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed (extra: ray)")


@pytest.fixture(autouse=True)
def no_ray_left():
    import ray

    assert not ray.is_initialized()  # each test starts from a process without Ray, as a run does
    yield
    if ray.is_initialized():
        ray.shutdown()


def test_the_reward_side_closing_first_leaves_ray_to_the_rollout_fleet():
    # reward.executor=ray starts the Ray, the rollout fleet (launch_on=ray) joins it; the trainer closes the reward
    # service first. Before the fix that close stopped Ray: the fleet's actors were gone, and its close started a
    # new local Ray and failed with ActorHandleNotFoundError
    import ray

    profile = load_profile(
        "tiny-rule-served",
        ["reward.executor=ray", "reward.num_workers=1", "rollout.server.launch_on=ray", "rollout.server.threads=1"],
    )
    spec = fleet_spec(profile)
    fleet = ServerFleet(spec, role="policy", model_path="unused", api_key=fleet_key(spec, None))

    async def scenario() -> tuple[list[str], bool, bool]:
        service = RewardService(profile.reward)
        await service.start()  # starts the Ray
        placer = RayReplicas(spec, "rollout.server")
        pool = ServerPool(fleet.replica_launch(), replicas=1, placer=placer)  # joins it: one replica's actor
        await service.close()
        up_for_the_fleet = ray.is_initialized()
        failed = []
        for step in (pool.stop, placer.close):  # ServerFleet.close
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - each step's failure reported below
                failed.append(f"{step.__qualname__}: {type(exc).__name__}: {exc}")
        return failed, up_for_the_fleet, ray.is_initialized()

    failed, up_for_the_fleet, left_up = asyncio.run(scenario())
    assert failed == [] and up_for_the_fleet
    assert not left_up  # the last part out stopped the Ray this process started


HEAD = """
import sys
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
print(cluster.address, flush=True)
sys.stdin.readline()
cluster.shutdown()
"""


def test_without_an_address_a_part_joins_the_cluster_ray_address_names(monkeypatch):
    # `ray job submit -- rlrm train ...` runs the driver with RAY_ADDRESS set to the job's cluster; before the fix
    # rlrm started a private one-node Ray beside it
    import ray

    from rlrm.engine.rewards.ray_workers import RayRewardWorkers

    head = subprocess.Popen([sys.executable, "-c", HEAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        address = head.stdout.readline().strip()
        assert address, "the cluster did not start"
        monkeypatch.setenv("RAY_ADDRESS", address)
        workers = RayRewardWorkers(RewardConfig(executor="ray", num_workers=1), urls=[], model_path=None)
        workers.start()
        try:
            joined = ray.get_runtime_context().gcs_address
        finally:
            workers.close()
        left_up = ray.is_initialized()
    finally:
        head.communicate("stop\n", timeout=60)  # the cluster shuts itself down (its processes are its own)
    assert joined == address
    assert not left_up  # joined by rlrm: rlrm's to leave (the cluster itself stays up)
