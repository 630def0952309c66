"""Reward workers as Ray actors on a two-node `ray.cluster_utils.Cluster` started by the test."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import statistics

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


# Reward services with executor=ray against the stand-in hosted API (tests/fixtures), on this module's cluster: the
# service uses the Ray it finds running (as on a user's cluster) and leaves it up; one Ray start serves them all. The
# service that starts and stops a Ray of its own is tested in test_reward_service.py.


def test_ray_workers_share_one_budget_not_one_each(two_node_cluster, monkeypatch):
    # (from test_hosted_judge.py) three Ray reward workers, each scoring its own samples: one limiter actor holds the
    # run's budget, so the API sees the limit, not three times it (a per-worker limiter would draw 429s here)
    import test_hosted_judge as hosted
    from standin_openai_api import StandinOpenAIAPI

    monkeypatch.setenv("STANDIN_KEY", hosted.KEY)
    rpm = 240.0
    with StandinOpenAIAPI(hosted.KEY, rpm=rpm) as api:
        cfg = hosted.config(api, executor="ray", num_workers=3, limits={"rpm": rpm})
        results, metrics = hosted.score(cfg, hosted.samples(18))
        times = [t for t, _ in api.accepted]
    assert not api.throttled and metrics["reward/rate_limited"] == 0
    assert [r.score for r in results] == [1.0 if i % 2 == 0 else 0.0 for i in range(18)]
    # the API's own token bucket (a burst of rpm/60) turned nothing away; and the requests left one slot (60/rpm s)
    # apart: the median gap between arrivals, as the API saw them, is that slot. A limiter per worker would send
    # three at each slot (a median gap near 0). Not the rate from first to last: a loaded machine delays single
    # arrivals by up to half a second (seen in CI at ebc2ece: 278.8 rpm from 17 requests, with no 429), and one late
    # first arrival shortens the whole span
    gaps = [later - earlier for earlier, later in zip(times, times[1:])]
    assert statistics.median(gaps) >= 0.8 * 60.0 / rpm, gaps
    assert metrics["reward/model_calls"] == 18


def test_in_ray_workers_a_functions_calls_are_counted_and_share_the_runs_limit(two_node_cluster, tmp_path, monkeypatch):
    # (from test_custom_model_reward.py) each Ray reward worker has its own forwarder; the rate limit is still the
    # run's one budget
    import test_custom_model_reward as custom
    from standin_openai_api import StandinOpenAIAPI

    monkeypatch.setenv("STANDIN_KEY", custom.KEY)
    rpm = 300.0
    path = tmp_path / "judge_some.py"
    path.write_text(custom.FUNCTION)
    with StandinOpenAIAPI(custom.KEY, rpm=rpm) as api:
        cfg = RewardConfig.model_validate(
            {
                "kind": "custom",
                "custom": {"path": str(path)},
                "server": {"model": api.model, "addresses": [api.base_url], "api_key_env": "STANDIN_KEY"},
                "executor": "ray",
                "num_workers": 2,
                "limits": {"rpm": rpm},
            }
        )
        results, metrics = custom.run(cfg, 12)
    assert not api.throttled and metrics["reward/rate_limited"] == 0
    assert [r.score for r in results] == [1.0, 0.0] * 6 and metrics["reward/failures"] == 0
    # per sample: GET /v1/models, /classify for samples 1 and 3 (404), the judge for the even ones
    assert metrics["reward/model_calls"] == 12 + 2 + 6 and metrics["reward/model_not_found"] == 2


def test_ray_workers_send_the_headers_too(two_node_cluster, monkeypatch):
    # (from test_hosted_headers.py) the driver reads the variables and hands the values to its Ray workers: a remote
    # node may not have them (this cluster's nodes started before the variables were set)
    import test_hosted_headers as headers
    from standin_openai_api import StandinOpenAIAPI

    monkeypatch.setenv("STANDIN_KEY", headers.KEY)
    monkeypatch.setenv("STANDIN_ORG", headers.ORG)
    with StandinOpenAIAPI(headers.KEY, rpm=6000, required_headers={"OpenAI-Organization": headers.ORG}) as api:
        cfg = headers.config(api, headers_env={"OpenAI-Organization": "STANDIN_ORG"})
        cfg = cfg.model_copy(update={"executor": "ray", "num_workers": 2})
        results, _ = headers.score(cfg, headers.samples(4))
        assert api.missing_headers == [] and len(api.accepted) == 1 + 4
    assert [r.score for r in results] == [1.0, 0.0] * 2
