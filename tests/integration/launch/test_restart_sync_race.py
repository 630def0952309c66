"""A weight sync while the supervisor loads the current weights into a restarted replica.

Before rlrm/launch/client/disk_sync.py's lock, the sync deleted the folder the restarted replica was loading
(`keep_only`), or loaded the new version into it first so that the hook's own load was refused as not increasing:
the hook failed, the supervisor killed the fresh replica and restarted it once more. The restart hook's load is
slowed by 3 s here (a real model's load takes seconds); nothing else is changed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rlrm.config.servers import RolloutServerConfig
from rlrm.inference.base import SamplingParams
from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.client.replica_info import held_version
from rlrm.launch.client.rollout_engine import ServerRolloutEngine
from rlrm.launch.client.wire import SGLangWire
from rlrm.launch.fleet.server_fleet import ServerFleet


def _engine(model_path, tmp_path, replicas: int) -> ServerRolloutEngine:
    fleet = ServerFleet(
        RolloutServerConfig(router="client", threads=1, replicas=replicas).fleet_spec(),
        role="policy",
        model_path=str(model_path),
    )
    return ServerRolloutEngine(fleet, SGLangWire(), WeightFiles(str(tmp_path)), request_timeout_s=60, sync_timeout_s=60)


def _shifted(model_path: Path, shift: float) -> dict:
    from safetensors.torch import load_file

    return {k: v + shift for k, v in load_file(str(model_path / "model.safetensors")).items()}


def test_a_sync_during_a_restarted_replicas_load_waits_for_it_and_the_replica_serves_the_newest(
    tiny_policy_path, tmp_path
):
    engine = _engine(tiny_policy_path, tmp_path, replicas=2)
    real_push, loading, hook_errors = engine.disk.push_one, [], []

    def slow_restart_load(url, path, version, may_be_dead=False):
        if not may_be_dead:  # the restart hook's load (a sync's loads may meet a dead replica)
            loading.append(version)
            time.sleep(3.0)
        return real_push(url, path, version, may_be_dead)

    engine.disk.push_one = slow_restart_load
    hook = engine._load_into_restarted

    async def recording_hook(url):
        try:
            await hook(url)
        except Exception as exc:
            hook_errors.append(str(exc))
            raise

    engine.fleet.on_restart = recording_hook

    async def scenario():
        await engine.start()
        try:
            engine.update_weights(_shifted(tiny_policy_path, 0.01), version=1)
            victim = engine.fleet.pool.servers[0]
            victim.kill()
            while not loading:  # the supervisor restarted it and loads version 1 into it
                await asyncio.sleep(0.1)
            await asyncio.to_thread(engine.update_weights, _shifted(tiny_policy_path, 0.02), 2)  # the next sync
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and (
                engine.fleet.pool.restarting or not engine.balancer.healthy[victim.url]
            ):
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.5)  # a second death would show here
            return held_version(victim.url, None, 10), engine.fleet.restarts
        finally:
            await engine.close()

    held, restarts = asyncio.run(scenario())
    assert hook_errors == [] and restarts == 1  # before: the hook failed and the replica was killed again
    assert held == 2  # the sync waited for the restart's load, then reached the restarted replica too
    assert loading == [1]


def test_held_version_reads_what_a_replica_reports_and_none_from_a_dead_port(tiny_policy_path, tmp_path):
    from held_ports import refused_port

    engine = _engine(tiny_policy_path, tmp_path, replicas=1)

    async def scenario():
        await engine.start()
        try:
            url = engine.fleet.replica_urls[0]
            before = held_version(url, None, 10)
            engine.update_weights(_shifted(tiny_policy_path, 0.01), version=3)
            return before, held_version(url, None, 10)
        finally:
            await engine.close()

    assert asyncio.run(scenario()) == (0, 3)
    with refused_port() as port:
        assert held_version(f"http://127.0.0.1:{port}", None, 2) is None


def test_requests_made_during_a_sync_are_not_refused_by_the_replicas_it_has_not_reached_yet(tiny_policy_path, tmp_path):
    # They were tagged with the new version before any replica held it: a replica still loading answered with the
    # version before, which counted as stale, was refused and generated again elsewhere.
    engine = _engine(tiny_policy_path, tmp_path, replicas=2)
    real_push, slow = engine.disk.push_one, []

    def one_slow_replica(url, path, version, may_be_dead=False):
        if url == slow[0]:
            time.sleep(3.0)  # the other replica loads at once; this one a few seconds later
        return real_push(url, path, version, may_be_dead)

    engine.disk.push_one = one_slow_replica

    async def scenario():
        await engine.start()
        try:
            slow.append(engine.fleet.replica_urls[1])
            sync = asyncio.create_task(asyncio.to_thread(engine.update_weights, _shifted(tiny_policy_path, 0.01), 1))
            await asyncio.sleep(1.0)  # the first replica holds version 1, the second still 0
            completions = await asyncio.gather(
                *(engine.generate([5, 6, 7 + i], SamplingParams(max_new_tokens=4, seed=i)) for i in range(8))
            )
            await sync
            return completions, engine.take_metrics()
        finally:
            await engine.close()

    completions, metrics = asyncio.run(scenario())
    assert metrics["rollout/stale_refused"] == 0
    assert {c.policy_version for c in completions} <= {0, 1}
