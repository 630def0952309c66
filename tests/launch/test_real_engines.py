"""The same rollout contract on real vLLM / SGLang servers (GPU machines with the packages: pytest -m vllm / -m sglang).

Neither engine installs beside rlrm's CPU torch, so these never run in the default tiers; the stand-in tests
(test_engine_standins.py) pin the HTTP shapes they rely on.
"""

from __future__ import annotations

import asyncio

import pytest

from rlrm.config.servers import RolloutServerConfig
from rlrm.inference.base import SamplingParams
from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.client.rollout_engine import ServerRolloutEngine
from rlrm.launch.client.wire import wire_for
from rlrm.launch.fleet.server_fleet import ServerFleet


def _roundtrip(backend: str, model_path: str, tmp_path):
    from safetensors.torch import load_file

    cfg = RolloutServerConfig(
        backend=backend,
        router="client",
        dtype="float32",
        start_timeout_s=900,
        extra_args=["--gpu-memory-utilization", "0.3"] if backend == "vllm" else ["--mem-fraction-static", "0.3"],
    )
    fleet = ServerFleet(cfg.fleet_spec(), role="policy", model_path=model_path)
    engine = ServerRolloutEngine(
        fleet, wire_for(backend, model_path), WeightFiles(str(tmp_path), config_from=model_path)
    )
    state = load_file(f"{model_path}/model.safetensors")

    async def scenario():
        await engine.start()
        try:
            sampling = SamplingParams(temperature=0.0, max_new_tokens=8, seed=1)
            before = await engine.generate([5, 6, 7], sampling)
            engine.update_weights({k: v * 0 if "embed" in k else v for k, v in state.items()}, version=1)
            after = await engine.generate([5, 6, 7], sampling)
            engine.update_weights(state, version=2)
            back = await engine.generate([5, 6, 7], sampling)
            return before, after, back
        finally:
            await engine.close()

    return asyncio.run(scenario())


@pytest.mark.vllm
def test_vllm_rollout_server_reloads_weights(tiny_policy_path, tmp_path):
    before, after, back = _roundtrip("vllm", str(tiny_policy_path), tmp_path)
    assert after.token_ids != before.token_ids and back.token_ids == before.token_ids
    assert (before.policy_version, after.policy_version, back.policy_version) == (0, 1, 2)


@pytest.mark.sglang
def test_sglang_rollout_server_reloads_weights(tiny_policy_path, tmp_path):
    before, after, back = _roundtrip("sglang", str(tiny_policy_path), tmp_path)
    assert after.token_ids != before.token_ids and back.token_ids == before.token_ids
    assert (before.policy_version, after.policy_version, back.policy_version) == (0, 1, 2)
