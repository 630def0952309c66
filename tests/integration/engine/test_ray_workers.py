"""Reward workers as Ray actors on a two-node `ray.cluster_utils.Cluster` started by the test."""

from __future__ import annotations

import asyncio
import importlib.util
import os

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.loop import RewardLoop
from rlrm.engine.rewards.rule import make_rule_reward

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed (extra: ray)")


@pytest.fixture(scope="module")
def two_node_cluster():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()  # both nodes registered before any actor is placed
    ray.init(address=cluster.address, log_to_driver=False)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 2

    @ray.remote(num_cpus=0)
    def where():
        return ray.get_runtime_context().get_node_id()

    # a task pinned (hard) to each node: both raylets serve before soft placement is tested
    pinned = [where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote() for n in nodes]
    assert ray.get(pinned) == nodes
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def samples(n):
    return [
        RewardSample(
            uid=f"p{i // 4}",
            index=i,
            data_source="t",
            prompt=[{"role": "user", "content": "q"}],
            solution_str=f"#### {i if i % 3 else i + 1}",
            ground_truth=str(i),
        )
        for i in range(n)
    ]


def test_workers_spread_over_nodes_and_score_like_local(two_node_cluster):
    from rlrm.engine.rewards.ray_workers import RayRewardWorkers

    cfg = RewardConfig(executor="ray", num_workers=2)
    workers = RayRewardWorkers(cfg, urls=[], model_path=None)
    workers.start()
    try:
        assert len(set(workers.node_ids())) == 2  # one actor on each node
        batch = samples(12)
        remote = asyncio.run(RewardLoop(workers.score, cfg).score_all(batch))
        local = asyncio.run(RewardLoop(make_rule_reward(cfg), cfg).score_all(batch))
        assert [r.score for r in remote] == [r.score for r in local]
        assert [r.extra for r in remote] == [r.extra for r in local]  # reward_extra_info survives the trip
    finally:
        workers.close()


def test_remote_failures_keep_their_kind(two_node_cluster):
    from rlrm.engine.rewards.ray_workers import RayRewardWorkers

    cfg = RewardConfig(
        executor="ray",
        num_workers=1,
        kind="genrm",
        server={"model": "unused", "request_timeout_s": 5},
        max_retries=1,
        backoff_s=0.0,
        attempt_timeout_s=5,
    )
    # a judge address where nothing listens: connection errors, retried, then defaulted and counted
    workers = RayRewardWorkers(cfg, urls=["http://127.0.0.1:9"], model_path=None)
    workers.start()
    try:
        loop = RewardLoop(workers.score, cfg)
        result = asyncio.run(loop.score(samples(1)[0]))
        metrics = loop.take_metrics()
        assert result.extra["reward_failed"] and metrics["reward/retries"] == 1 and metrics["reward/defaulted"] == 1
        assert "TransientError" not in result.extra["reward_error"] and "127.0.0.1:9" in result.extra["reward_error"]
    finally:
        workers.close()


def test_a_lost_worker_hands_its_samples_to_the_next(two_node_cluster):
    import ray

    from rlrm.engine.rewards.ray_workers import RayRewardWorkers

    cfg = RewardConfig(executor="ray", num_workers=2)
    workers = RayRewardWorkers(cfg, urls=[], model_path=None)
    workers.start()
    try:
        ray.kill(workers.actors[0])
        loop = RewardLoop(workers.score, cfg)
        results = asyncio.run(loop.score_all(samples(6)))
        assert all(r is not None and "reward_failed" not in r.extra for r in results)
    finally:
        workers.close()
