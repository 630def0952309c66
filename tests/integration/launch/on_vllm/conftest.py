"""The vLLM policy replica shared by this folder's tests: launched once per session (a 35-130 s start on 2 cores).

test_vllm_agent.py uses it first, with the policy's own weights (its file sorts before test_vllm_rollout.py);
test_vllm_rollout.py then reloads weights, trains through it and, last, kills it (see that module's docstring).
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rlrm.config.servers import RolloutServerConfig
from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.client.rollout_engine import ServerRolloutEngine
from rlrm.launch.client.wire import wire_for
from rlrm.launch.fleet.server_fleet import ServerFleet


class _Loop:
    """A background event loop the session's engine lives on (its supervisor needs one that keeps running)."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout_s: float = 900):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="session")
def vllm_rollout(tiny_policy_path, tmp_path_factory):
    """(engine, loop): a started ServerRolloutEngine over one launched vLLM policy replica (fp32, client router)."""
    path = str(tiny_policy_path)
    cfg = RolloutServerConfig(backend="vllm", router="client", dtype="float32", start_timeout_s=600)
    fleet = ServerFleet(cfg.fleet_spec(), role="policy", model_path=path)
    files = WeightFiles(str(tmp_path_factory.mktemp("vllm-weights")), config_from=path)
    engine = ServerRolloutEngine(fleet, wire_for("vllm", fleet.served_name), files, sync_timeout_s=120)
    loop = _Loop()
    started = time.perf_counter()
    loop.run(engine.start())
    print(f"vLLM policy replica healthy after {time.perf_counter() - started:.1f} s")
    yield engine, loop
    loop.run(engine.close(), 120)
    loop.close()
