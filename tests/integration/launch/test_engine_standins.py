"""vLLM and SGLang as rollout servers, contract-tested against a STAND-IN server (tests/integration/launch/standin_engine.py,
a real subprocess speaking their documented HTTP shapes); the real engines are behind the vllm/sglang markers."""

from __future__ import annotations

import asyncio
import json
import sys
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
from rlrm.launch.fleet.backends import ReplicaLaunch
from rlrm.launch.fleet.engine_argv import engine_argv, engine_env
from rlrm.launch.fleet.process import ServerProcess
from rlrm.launch.fleet.server_fleet import ServerFleet
from rlrm.launch.fleet.spec import FleetSpec

STANDIN = str(Path(__file__).with_name("standin_engine.py"))


def _standin(kind, log, *flags):
    # movable: started again on a fresh port if another process took this one before the stand-in bound it
    return ServerProcess.movable(
        [sys.executable, STANDIN, "--kind", kind, "--port", str(free_port()), "--log", str(log), *flags]
    )


def _engine(kind, urls, tmp_path, model_dir=None):
    cfg = RolloutServerConfig(backend=kind, addresses=urls, router="client")
    fleet = ServerFleet(cfg.fleet_spec(), role="policy", model_path="standin")  # a vLLM policy: /v1/completions
    return ServerRolloutEngine(
        fleet,
        wire_for(kind, "standin"),
        WeightFiles(str(tmp_path / "w"), config_from=model_dir),
        request_timeout_s=10,
        sync_timeout_s=10,
        max_retries=2,
    )


def _calls(log):
    return [json.loads(line) for line in Path(log).read_text().splitlines()]


def test_vllm_generation_and_weight_reload_against_a_standin(tmp_path, tiny_policy_path):
    log = tmp_path / "calls.jsonl"
    with _standin("vllm", log) as server:
        engine = _engine("vllm", [server.url], tmp_path, model_dir=str(tiny_policy_path))

        async def scenario():
            await engine.start()
            try:
                first = await engine.generate([5, 6], SamplingParams(max_new_tokens=4, seed=3, stop_token_ids=[2]))
                engine.update_weights({"w": torch.ones(3)}, version=1)
                second = await engine.generate([5, 6], SamplingParams(max_new_tokens=4, seed=3))
                return first, second
            finally:
                await engine.close()

        first, second = asyncio.run(scenario())
    assert len(first.token_ids) == 4 and first.log_probs == pytest.approx([-0.1, -0.2, -0.3, -0.4])
    assert first.log_probs[2] == float(torch.tensor(-0.3, dtype=torch.float32))  # float32, as the hf engine's
    assert first.finish_reason == "length" and first.policy_version == 0 and second.policy_version == 1
    calls = _calls(log)
    request = next(c["body"] for c in calls if c["path"] == "/v1/completions" and c["body"].get("seed") == 3)
    assert request["prompt"] == [5, 6] and request["return_token_ids"] is True and request["logprobs"] == 0
    assert request["stop_token_ids"] == [2] and request["max_tokens"] == 4 and request["model"] == "standin"
    sync = [c for c in calls if c["path"] in ("/collective_rpc", "/reset_prefix_cache")]
    assert [c["path"] for c in sync] == [
        "/collective_rpc",
        "/reset_prefix_cache",
    ]  # reload, then drop the old KV blocks
    assert sync[0]["body"]["method"] == "reload_weights" and sync[0]["had_weights"] is True
    assert sync[0]["body"]["kwargs"]["weights_path"].endswith("/v1")
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir())  # the run's weight files are gone


def test_a_vllm_reload_failure_names_the_replica(tmp_path):
    with _standin("vllm", tmp_path / "calls.jsonl", "--fail-reload") as server:
        engine = _engine("vllm", [server.url], tmp_path)

        async def scenario():
            await engine.start()
            try:
                engine.update_weights({"w": torch.ones(3)}, version=4)
            finally:
                await engine.close()

        with pytest.raises(
            RolloutServerError,
            match=rf"rollout replica {server.url} refused weights version 4: POST "
            r"/collective_rpc answered 500: .*reload_weights failed",
        ):
            asyncio.run(scenario())


def test_sglang_sync_and_a_replica_reporting_the_base_version_is_never_trusted(tmp_path):
    good_log, stale_log = tmp_path / "good.jsonl", tmp_path / "stale.jsonl"
    with _standin("sglang", good_log) as good, _standin("sglang", stale_log, "--stale") as stale:
        engine = _engine("sglang", [good.url, stale.url], tmp_path)

        async def scenario():
            await engine.start()
            try:
                engine.update_weights({"w": torch.ones(3)}, version=2)
                done = await asyncio.gather(
                    *(engine.generate([5, i], SamplingParams(max_new_tokens=3, seed=i)) for i in range(12))
                )
                return done, engine.take_metrics()
            finally:
                await engine.close()

        done, metrics = asyncio.run(scenario())
    assert all(c.policy_version == 2 for c in done)  # every sample from version 2, none from the "default" replica
    assert engine.dtype is None  # SGLang's own kernels: `auto` recomputes the old log-probs with the actor
    assert metrics["rollout/stale_refused"] >= 1 and metrics["rollout/retries"] >= metrics["rollout/stale_refused"]
    sync = next(c for c in _calls(good_log) if c["path"] == "/update_weights_from_disk")
    assert sync["body"]["weight_version"] == "2" and sync["body"]["abort_all_requests"] is False and sync["had_weights"]
    requests = [c["body"] for c in _calls(good_log) if c["path"] == "/generate" and c["body"]["input_ids"] != [1]]
    batched = next(r for r in requests if isinstance(r["input_ids"][0], list))  # the requests of one turn, in one call
    assert batched["return_logprob"] is True and len(batched["input_ids"]) == len(batched["sampling_params"]) > 1
    assert all(
        set(p) >= {"temperature", "top_p", "top_k", "max_new_tokens", "sampling_seed"}
        for p in batched["sampling_params"]
    )


def test_sglang_distributed_sync_sends_sglangs_request_bodies(tmp_path):
    log = tmp_path / "calls.jsonl"
    with _standin("sglang", log) as server:
        cfg = RolloutServerConfig(backend="sglang", addresses=[server.url], router="client", weight_sync="distributed")
        engine = ServerRolloutEngine(
            ServerFleet(cfg.fleet_spec(), role="policy", model_path="standin"),
            wire_for("sglang"),
            WeightFiles(str(tmp_path / "w")),
            request_timeout_s=10,
            sync_timeout_s=30,
            weight_sync="distributed",
            sync_backend="gloo",
        )
        state = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(4, dtype=torch.bfloat16)}

        async def scenario():
            await engine.start()
            try:
                engine.update_weights(state, version=3)
                done = await engine.generate([5, 6], SamplingParams(max_new_tokens=3, seed=1))
                return done, engine.take_metrics()
            finally:
                await engine.close()

        done, metrics = asyncio.run(scenario())
    calls = {c["path"]: c["body"] for c in _calls(log) if c["path"] != "/generate"}
    init = calls["/init_weights_update_group"]
    assert init == {
        "master_address": "127.0.0.1",
        "master_port": init["master_port"],
        "rank_offset": 1,
        "world_size": 2,
        "group_name": "weight_update_group",
        "backend": "gloo",
    }
    update = calls["/update_weights_from_distributed"]
    assert update.pop("received_sums") == [15.0, 4.0]  # the stand-in received the tensors, in the order of `names`
    assert update == {
        "names": ["w", "b"],
        "dtypes": ["float32", "bfloat16"],
        "shapes": [[2, 3], [4]],
        "group_name": "weight_update_group",
        "flush_cache": True,
        "abort_all_requests": False,
        "weight_version": "3",
        "load_format": None,
    }
    assert calls["/destroy_weights_update_group"] == {"group_name": "weight_update_group"}  # at close
    assert "/update_weights_from_disk" not in calls and not (tmp_path / "w").exists()  # nothing written to disk
    assert (
        done.policy_version == 3 and metrics["timing_s/weight_broadcast"] > 0 and metrics["timing_s/weight_write"] == 0
    )


def test_engine_command_lines_for_policy_and_reward_servers():
    spec = FleetSpec(backend="vllm", dtype="bfloat16", extra_args=("--gpu-memory-utilization", "0.5"))
    vllm = ReplicaLaunch.of(spec, "policy", "Qwen/Qwen2.5-1.5B-Instruct").argv("127.0.0.1", 8000)
    assert vllm[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model", "Qwen/Qwen2.5-1.5B-Instruct"]
    assert vllm[-2:] == ["--gpu-memory-utilization", "0.5"]
    assert engine_env("vllm", None, "policy", "cuda") == {"VLLM_SERVER_DEV_MODE": "1"}  # /collective_rpc: dev mode
    assert engine_env("vllm", None, "genrm", "cuda") == {}
    sglang = ReplicaLaunch.of(FleetSpec(backend="sglang", dtype="bfloat16"), "policy", "m").argv("127.0.0.1", 8001)
    assert sglang[1:3] == ["-m", "sglang.launch_server"] and "--is-embedding" not in sglang
    assert engine_argv("sglang", "rm", "disrm", 8002)[-1] == "--is-embedding"
    # reward servers go through the same fleet code: reward.server.backend=vllm
    from rlrm.config.reward import RewardConfig

    reward = RewardConfig(kind="genrm", server={"model": "judge", "backend": "vllm", "replicas": 2, "router": "client"})
    argvs = ServerFleet(reward.server.fleet_spec(), role="genrm", model_path="judge").argvs()
    assert [a[3:5] for a in argvs] == [["--model", "judge"], ["--model", "judge"]]
