"""The same rollout contract on a real SGLang server (GPU machines with the package: pytest -m sglang).

SGLang's wheel needs CUDA (cuda-python, flashinfer, sglang-kernel), so this never runs on CPU; the stand-in tests
(test_engine_standins.py) pin the HTTP shapes it relies on. The real vLLM runs on CPU too: test_vllm_rollout.py.
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
        extra_args=["--mem-fraction-static", "0.3"],
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


@pytest.mark.sglang
def test_sglang_rollout_server_reloads_weights(tiny_policy_path, tmp_path):
    before, after, back = _roundtrip("sglang", str(tiny_policy_path), tmp_path)
    assert after.token_ids != before.token_ids and back.token_ids == before.token_ids
    assert (before.policy_version, after.policy_version, back.policy_version) == (0, 1, 2)
