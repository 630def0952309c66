"""Ray reward workers give a user's custom function the same deadline and the same error lines as the local path:
one custom function in a worker process, scored through the same RewardLoop settings both ways."""

from __future__ import annotations

import asyncio
import importlib.util
import os

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.reward_service import RewardService
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.factory import build_reward_fn
from rlrm.engine.rewards.loop import RewardLoop

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed (extra: ray)")

FUNCTION = """
import sys
import time


def compute_score(data_source, solution_str, ground_truth, extra_info):
    if solution_str == "hang":
        time.sleep(120)
    if solution_str == "boom":
        raise ValueError("boom")
    if solution_str == "missing":
        return {}["key"]  # a KeyError, whose str() quotes the key
    if solution_str == "exit":
        sys.exit(3)
    return 1.0
"""


@pytest.fixture(scope="module")
def local_ray():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    # a Ray of its own: without address="local", ray.init joins the cluster a test on the other xdist worker has up
    # (ray.cluster_utils.Cluster writes /tmp/ray/ray_current_cluster), and refuses num_cpus there (a CI error)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture
def function_path(tmp_path):
    path = tmp_path / "reward_fn.py"
    path.write_text(FUNCTION)
    return str(path)


def config(path: str, **kw) -> RewardConfig:
    settings = dict(
        kind="custom",
        custom={"path": path, "name": "compute_score", "processes": 1},
        num_workers=1,
        max_retries=0,
        on_failure="default",
        default_score=0.0,
    )
    return RewardConfig(**{**settings, **kw})


def sample(text: str) -> RewardSample:
    return RewardSample(
        uid="p0",
        index=0,
        data_source="t",
        prompt=[{"role": "user", "content": "q"}],
        solution_str=text,
        ground_truth="",
    )


def errors(fn, cfg: RewardConfig, texts: list[str]) -> list[str]:
    loop = RewardLoop(fn, cfg)
    return [asyncio.run(loop.score(sample(text))).extra["reward_error"] for text in texts]


def test_a_hung_call_is_cancelled_in_its_worker_and_the_next_sample_scores(local_ray, function_path):
    from rlrm.engine.rewards.ray_workers import RayRewardWorkers

    cfg = config(function_path, executor="ray", attempt_timeout_s=3.0)
    workers = RayRewardWorkers(cfg, urls=[], model_path=None)
    workers.start()
    try:

        async def scenario():
            warm = await RewardLoop(workers.score, cfg.model_copy(update={"attempt_timeout_s": 60.0})).score(
                sample("ok")
            )
            loop = RewardLoop(workers.score, cfg)
            hung = await loop.score(sample("hang"))  # given up at 3 s: its worker process must go with it
            after = await loop.score(sample("fine"))  # the same actor and its pool of one worker
            return warm, hung, after, loop.take_hung()

        warm, hung, after, records = asyncio.run(scenario())
    finally:
        workers.close()
    assert warm.score == 1.0 and hung.extra["reward_failed"]
    # before the fix the actor's call went on, holding the pool's only worker for 120 s: this sample timed out too
    assert after.score == 1.0 and not after.extra.get("reward_failed"), after.extra.get("reward_error")
    assert hung.extra["reward_error"] == "reward function compute_score: no reward within reward.attempt_timeout_s=3 s"
    assert [r["function"] for r in records] == ["compute_score"]  # hung_rewards.jsonl names the user's function


def test_a_functions_errors_read_as_on_the_local_path(local_ray, function_path):
    from rlrm.engine.rewards.ray_workers import RayRewardWorkers

    texts = ["boom", "missing", "exit"]
    local_cfg = config(function_path, attempt_timeout_s=30.0)
    fn = build_reward_fn(local_cfg)
    try:
        local = errors(fn, local_cfg, texts)
    finally:
        fn.close()
    cfg = config(function_path, executor="ray", attempt_timeout_s=30.0)
    workers = RayRewardWorkers(cfg, urls=[], model_path=None)
    workers.start()
    try:
        remote = errors(workers.score, cfg, texts)
    finally:
        workers.close()
    # before the fix: "reward function score raised RuntimeError: ValueError: boom", and sys.exit as RuntimeError
    assert local[0].startswith("reward function compute_score raised ValueError: boom (sample ")
    assert local[2] == "reward function compute_score called sys.exit(3); return a score instead"
    assert remote == local


def test_the_calls_of_an_attempt_cut_off_by_its_timeout_are_counted_as_on_the_local_path(
    local_ray, tmp_path, monkeypatch
):
    # (test_custom_model_reward.py's test_calls_an_attempt_made_before_its_timeout_are_still_counted, in a Ray
    # worker) the calls land in the actor's ledger; before the fix the driver cancelled the attempt and the
    # counts went with it: reward/model_calls read 0
    import test_custom_model_reward as custom
    from standin_openai_api import StandinOpenAIAPI

    monkeypatch.setenv("STANDIN_KEY", custom.KEY)
    path = tmp_path / "slow_after_calls.py"
    path.write_text(custom.SLOW_AFTER_CALLS)

    async def scenario(cfg: RewardConfig):
        service = RewardService(cfg)
        await service.start()
        try:
            results = await service.loop.score_all(custom.samples(2))
            assert service.workers is not None
            (actor,) = service.workers.actors  # what the actor keeps for the driver: nothing once taken
            kept = await actor.__ray_call__.remote(
                lambda worker: sum(len(getattr(worker, held, ())) for held in ("_running", "_cut_off"))
            )
            return results, service.loop.take_metrics(), kept
        finally:
            await service.close()

    with StandinOpenAIAPI(custom.KEY, rpm=6000) as api:
        cfg = RewardConfig.model_validate(
            {
                "kind": "custom",
                "custom": {"path": str(path)},
                "server": {"model": api.model, "addresses": [api.base_url], "api_key_env": "STANDIN_KEY"},
                "executor": "ray",
                "num_workers": 1,
                "attempt_timeout_s": 6.0,  # room for the two calls on a loaded machine; the sleep is 60 s
                "max_retries": 0,
                "max_failure_rate": 1.0,
            }
        )
        results, metrics, kept = asyncio.run(scenario(cfg))
    assert metrics["reward/timeouts"] == 2 and all(r.extra["reward_failed"] for r in results)
    assert metrics["reward/model_calls"] == 2 * 2  # each cut-off attempt's two calls
    assert kept == 0


def test_a_worker_keeps_a_cancelled_attempts_counts_until_taken_and_no_more(monkeypatch):
    # the actor's side of the test above, without Ray: the counts are there whether the driver's take comes
    # before or after the cancellation reaches the actor, taken once, and no more than CUT_OFF_KEPT are kept
    from rlrm.engine.rewards import ray_workers
    from rlrm.engine.rewards.ledger import current_ledger

    monkeypatch.setattr(ray_workers, "CUT_OFF_KEPT", 3)
    worker = ray_workers.RewardWorker(RewardConfig().model_dump(mode="json"), urls=[], model_path=None)
    started = asyncio.Event()

    async def two_calls_then_hang(sample):
        for _ in range(2):
            current_ledger().record("GET", "/v1/models", 200, 0.0)
        started.set()
        await asyncio.sleep(60)

    worker.fn = two_calls_then_hang  # the function the worker would build

    async def cut_off(request_id: str, take_first: bool = False) -> list:
        started.clear()
        task = asyncio.ensure_future(worker.score(sample("x"), request_id))
        await started.wait()
        takes = [await worker.take_cut_off(request_id)] if take_first else []
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        takes += [await worker.take_cut_off(request_id), await worker.take_cut_off(request_id)]
        return [c.get("model_calls") for c in takes]

    async def scenario():
        taken = await cut_off("after"), await cut_off("before", take_first=True)
        for i in range(5):  # never taken
            started.clear()
            task = asyncio.ensure_future(worker.score(sample("x"), f"left{i}"))
            await started.wait()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return taken

    after, before = asyncio.run(scenario())
    assert after == [2, None] and before == [2, None, None]  # taken once: then nothing is left of it
    assert list(worker._cut_off) == ["left2", "left3", "left4"] and not worker._running
