"""`rollout.top_k: 0` on SGLang (and vLLM) rollout servers, against STAND-INs that refuse a top_k as the engines do
(tests/integration/launch/standin_engine.py): SGLang refuses 0 ("top_k must be -1 (disable) or at least 1"), so
before, every /generate of an SGLang fleet answered 400 and the run died at its first step."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx
import pytest

from rlrm.config.servers import RolloutServerConfig
from rlrm.inference.base import SamplingParams
from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.client.rollout_engine import ServerRolloutEngine
from rlrm.launch.client.wire import wire_for
from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.process import ServerProcess
from rlrm.launch.fleet.server_fleet import ServerFleet

STANDIN = str(Path(__file__).with_name("standin_engine.py"))


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_top_k_zero_is_generated_with_and_the_standin_refuses_what_the_engine_refuses(kind, tmp_path):
    log = tmp_path / "calls.jsonl"
    argv = [sys.executable, STANDIN, "--kind", kind, "--port", str(free_port()), "--log", str(log)]
    with ServerProcess.movable(argv) as server:
        if kind == "sglang":  # the stand-in refuses as SGLang does
            refused = httpx.post(
                server.url + "/generate", json={"input_ids": [5], "sampling_params": {"top_k": 0}}, timeout=10
            )
            assert refused.status_code == 400 and "top_k must be -1 (disable) or at least 1" in refused.text
        cfg = RolloutServerConfig(backend=kind, addresses=[server.url], router="client")
        engine = ServerRolloutEngine(
            ServerFleet(cfg.fleet_spec(), role="policy", model_path="standin"),
            wire_for(kind, "standin"),
            WeightFiles(str(tmp_path / "w")),
            request_timeout_s=10,
            max_retries=0,
        )

        async def scenario():
            await engine.start()
            try:
                return await engine.generate([5, 6], SamplingParams(max_new_tokens=3, seed=1, top_k=0))
            finally:
                await engine.close()

        completion = asyncio.run(scenario())
    assert len(completion.token_ids) == 3
    sent = [json.loads(line)["body"] for line in log.read_text().splitlines()]
    params = [b.get("sampling_params", b) for b in sent]  # SGLang nests them, vLLM's completions do not
    assert [p["top_k"] for p in params if 3 in (p.get("max_tokens"), p.get("max_new_tokens"))] == [-1]
