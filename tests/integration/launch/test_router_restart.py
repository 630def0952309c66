"""The SGLang router in front of the policy replicas dies mid-run (OOM-killed, a crash): the fleet restarts it on
its port, says so in one line and counts it; requests made meanwhile wait for it instead of failing, and nothing
it started outlives `close`.

Before: nothing supervised the router (the pool restarts replicas only), and the rollout engine took the router,
which is no replica of the pool, for a dead replica being restarted: every request waited start_timeout_s +
sync_timeout_s per retry (about 48 minutes with the defaults) and then failed with a bare connection error."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
from pathlib import Path

import pytest

from rlrm.config.servers import RolloutServerConfig
from rlrm.inference.base import SamplingParams
from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.client.rollout_engine import ServerRolloutEngine
from rlrm.launch.client.wire import SGLangWire, wire_for
from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.process import ServerProcess
from rlrm.launch.fleet.server_fleet import ServerFleet

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("sglang_router") is None, reason="needs sglang-router"),
    pytest.mark.skipif(sys.platform != "linux", reason="reads /proc"),
]
STANDIN = str(Path(__file__).with_name("standin_engine.py"))


def _group_alive(pgid: int) -> list[int]:
    """Pids of the processes of process group `pgid` that are not zombies."""
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                alive.append(int(entry.name))
    return alive


def _gone(pgids: list[int], within_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        left = [p for g in pgids for p in _group_alive(g)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for g in pgids for p in _group_alive(g)]


def _kill_router_and_generate(engine, prompts, sampling):
    """Start, generate, SIGKILL the router, generate again; (before, after, seconds after the kill, pids, url,
    whether the restarted router ran, metrics)."""

    async def scenario():
        await engine.start()
        try:
            router = engine.fleet.router
            assert router is not None
            url, first_pid = router.url, router.proc.pid
            before = await asyncio.gather(*(engine.generate(p, s) for p, s in zip(prompts, sampling)))
            engine.take_metrics()
            router.kill()  # kill -9 of the router's process group; the replicas are alive and healthy
            t0 = time.monotonic()
            after = await asyncio.gather(*(engine.generate(p, s) for p, s in zip(prompts, sampling)))
            took = time.monotonic() - t0
            restarted = router.alive() and router.url == url and not engine.fleet.router_down()
            return before, after, took, [first_pid, router.proc.pid], restarted, engine.take_metrics()
        finally:
            await engine.close()

    return asyncio.run(scenario())


def test_a_dead_router_in_front_of_launched_replicas_is_restarted_and_requests_go_on(tiny_policy_path, tmp_path, capfd):
    # max_retries=0: a request made after the router died must not fail, nor wait for a replica restart
    spec = RolloutServerConfig(
        router="sglang", threads=1, replicas=2, max_retries=0, start_timeout_s=120, sync_timeout_s=5
    ).fleet_spec()
    fleet = ServerFleet(spec, role="policy", model_path=str(tiny_policy_path))
    engine = ServerRolloutEngine(
        fleet, SGLangWire(), WeightFiles(str(tmp_path)), request_timeout_s=60, sync_timeout_s=5, max_retries=0
    )
    prompts = [[5, 6, 7 + i] for i in range(3)]
    sampling = [SamplingParams(max_new_tokens=3, seed=i) for i in range(3)]
    before, after, took, pids, restarted, metrics = _kill_router_and_generate(engine, prompts, sampling)
    err = capfd.readouterr().err
    assert [c.token_ids for c in after] == [c.token_ids for c in before]  # served again, through the router
    assert restarted and pids[0] != pids[1]  # a new process on the same address
    assert took < 60, f"{took:.1f} s after the router died"
    assert "rlrm: the SGLang router died (exit code -9" in err and "restarting it on its port" in err, err
    assert metrics["rollout/router_restarts"] == 1 and metrics["rollout/replica_restarts"] == 0
    assert not _gone(pids), "router processes left running after close"


def test_a_dead_router_in_front_of_running_servers_is_restarted_too(tmp_path, capfd):
    log = tmp_path / "calls.jsonl"
    argv = lambda: [sys.executable, STANDIN, "--kind", "sglang", "--port", str(free_port()), "--log", str(log)]  # noqa: E731
    with ServerProcess.movable(argv()) as a, ServerProcess.movable(argv()) as b:
        cfg = RolloutServerConfig(backend="sglang", addresses=[a.url, b.url], router="sglang", start_timeout_s=60)
        fleet = ServerFleet(cfg.fleet_spec(), role="policy", model_path="standin")
        engine = ServerRolloutEngine(
            fleet, wire_for("sglang"), WeightFiles(str(tmp_path / "w")), request_timeout_s=10, max_retries=0
        )
        prompts = [[5, 6, 7 + i] for i in range(3)]
        sampling = [SamplingParams(max_new_tokens=3, seed=i) for i in range(3)]
        before, after, took, pids, restarted, metrics = _kill_router_and_generate(engine, prompts, sampling)
        assert a.alive() and b.alive()  # running servers are not the run's to stop
    assert [c.token_ids for c in after] == [c.token_ids for c in before]
    assert restarted and took < 60
    assert "rlrm: the SGLang router died (exit code -9" in capfd.readouterr().err
    assert metrics["rollout/router_restarts"] == 1
    assert not _gone(pids), "router processes left running after close"
