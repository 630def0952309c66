"""vLLM answers carry no weight version: the client keeps every completion within one (version_gate.py).

Against a STAND-IN vLLM (tests/integration/launch/standin_engine.py --token-delay: a real subprocess that samples
token by token, each token naming the weights loaded when it was sampled, 1000 + version), so that a
completion that straddles a reload shows it in its own tokens. Real vLLM: test_vllm_rollout.py.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from rlrm.config.servers import RolloutServerConfig
from rlrm.errors import RolloutServerError
from rlrm.inference.base import SamplingParams
from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.client.rollout_engine import ServerRolloutEngine
from rlrm.launch.client.wire import wire_for
from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.process import ServerProcess
from rlrm.launch.fleet.server_fleet import ServerFleet

STANDIN = str(Path(__file__).with_name("standin_engine.py"))


def _standin(tmp_path, *flags):
    log = tmp_path / "calls.jsonl"
    argv = [sys.executable, STANDIN, "--kind", "vllm", "--port", str(free_port()), "--log", str(log)]
    return ServerProcess.movable([*argv, *flags])  # started again on a fresh port if another process took this one


def _engine(url, tmp_path):
    cfg = RolloutServerConfig(backend="vllm", addresses=[url], router="client")
    fleet = ServerFleet(cfg.fleet_spec(), role="policy", model_path="standin")
    return ServerRolloutEngine(
        fleet, wire_for("vllm", "standin"), WeightFiles(str(tmp_path / "w")), request_timeout_s=20, sync_timeout_s=20
    )


def test_no_vllm_completion_straddles_a_weight_reload(tmp_path):
    """Requests stream without pause (as in fully-async) while the trainer's thread reloads the weights three
    times: every completion's tokens come from the one version it is tagged with (a reload landing mid-generation
    would mix 1000+v and 1000+v+1 in one completion, tagged v: trained as if sampled by v)."""
    sampling = SamplingParams(max_new_tokens=10, seed=1)  # 10 tokens x 20 ms: a reload lands mid-generation
    with _standin(tmp_path, "--token-delay", "0.02") as server:
        engine = _engine(server.url, tmp_path)

        async def scenario():
            await engine.start()
            done = threading.Event()
            waited = []

            def trainer():
                for version in (1, 2, 3):
                    time.sleep(0.3)
                    waited.append(engine.gate.in_flight)  # requests generating when the reload was asked for
                    engine.update_weights({"w": torch.full((2,), float(version))}, version=version)
                time.sleep(0.3)
                done.set()

            async def stream():
                out = []
                while not done.is_set():
                    out.append(await engine.generate([5, 6], sampling))
                return out

            try:
                reloads = asyncio.get_running_loop().run_in_executor(None, trainer)
                streams = await asyncio.gather(*(stream() for _ in range(4)))
                await reloads
                return [c for s in streams for c in s], waited
            finally:
                await engine.close()

        completions, waited = asyncio.run(scenario())
    assert max(waited) > 0, "no reload was asked for while requests were generating: the test proves nothing"
    assert {c.policy_version for c in completions} == {0, 1, 2, 3}
    for c in completions:
        assert set(c.token_ids) == {1000 + c.policy_version}, (c.policy_version, c.token_ids)


def test_a_vllm_server_without_dev_mode_is_one_line_naming_the_variable(tmp_path):
    with _standin(tmp_path, "--no-dev-mode") as server:
        engine = _engine(server.url, tmp_path)

        async def scenario():
            await engine.start()
            try:
                await engine.generate([5, 6], SamplingParams(max_new_tokens=2, seed=1))
                engine.update_weights({"w": torch.ones(2)}, version=1)
            finally:
                await engine.close()

        with pytest.raises(RolloutServerError) as err:
            asyncio.run(scenario())
    message = str(err.value)
    assert "\n" not in message and "/collective_rpc answered 404" in message
    assert "VLLM_SERVER_DEV_MODE=1" in message and server.url in message
