"""ServerRolloutEngine against real embedded policy replicas: faults a run must survive or refuse clearly."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest
import torch

from rlrm.config.servers import RolloutServerConfig
from rlrm.errors import RolloutServerError
from rlrm.inference.base import SamplingParams
from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.client.rollout_engine import ServerRolloutEngine, TrainerModel
from rlrm.launch.client.wire import SGLangWire
from rlrm.launch.fleet.process import ServerProcess, ServerStartError, embedded_server_argv
from rlrm.launch.fleet.server_fleet import ServerFleet


def _engine(model_path, tmp_path, expect=None, **cfg):
    fleet = ServerFleet(
        RolloutServerConfig(router="client", threads=1, **cfg).fleet_spec(), role="policy", model_path=str(model_path)
    )
    return ServerRolloutEngine(
        fleet, SGLangWire(), WeightFiles(str(tmp_path)), expect=expect, request_timeout_s=60, sync_timeout_s=60
    )


def _state(model_path, shift):
    from safetensors.torch import load_file

    return {k: v + shift for k, v in load_file(str(Path(model_path) / "model.safetensors")).items()}


def _variant(tiny_policy_path, path: Path, **changes) -> Path:
    """The tiny policy's architecture with `changes`, random weights, the same tokenizer files."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(tiny_policy_path)
    for key, value in changes.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    for f in Path(tiny_policy_path).glob("*token*"):
        (path / f.name).write_bytes(f.read_bytes())
    (path / "chat_template.jinja").write_bytes((Path(tiny_policy_path) / "chat_template.jinja").read_bytes())
    return path


def _vocab_size(model_path) -> int:
    """The tiny policy's vocabulary (its tokenizer's size too): 510 for recipe 3."""
    return json.loads((Path(model_path) / "config.json").read_text())["vocab_size"]


def test_kill_9_of_one_of_two_replicas_loses_nothing_and_it_comes_back_current_and_long_prompts_are_refused(
    tiny_policy_path, tmp_path
):
    vocab = _vocab_size(tiny_policy_path)
    engine = _engine(tiny_policy_path, tmp_path, expect=TrainerModel("tiny:policy", vocab, vocab, None), replicas=2)
    prompts = [[5, 6, 7 + i] for i in range(16)]
    sampling = [SamplingParams(max_new_tokens=8, seed=i) for i in range(16)]

    async def scenario():
        await engine.start()
        try:
            engine.update_weights(_state(tiny_policy_path, 0.05), version=1)
            reference = await asyncio.gather(*(engine.generate(p, s) for p, s in zip(prompts, sampling)))
            victim = engine.fleet.pool.servers[0]
            victim.kill()  # kill -9 of its process group
            after = await asyncio.gather(*(engine.generate(p, s) for p, s in zip(prompts, sampling)))
            engine.update_weights(
                _state(tiny_policy_path, 0.07), version=2
            )  # while it is down: skipped, loaded on restart
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # the first moment it says healthy, it already serves version 2
                try:
                    if httpx.get(victim.url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.05)
            info = httpx.get(victim.url + "/get_model_info").json()
            direct = httpx.post(
                victim.url + "/generate",
                json={
                    "input_ids": prompts[0],
                    "return_logprob": True,
                    "sampling_params": {"max_new_tokens": 8, "sampling_seed": 0},
                },
            ).json()
            other = httpx.post(
                engine.fleet.pool.servers[1].url + "/generate",
                json={
                    "input_ids": prompts[0],
                    "return_logprob": True,
                    "sampling_params": {"max_new_tokens": 8, "sampling_seed": 0},
                },
            ).json()
            with pytest.raises(
                RolloutServerError,
                match=r"prompt of 500 tokens \+ 20 new tokens exceeds the rollout servers' "
                r"512-token context; lower data.max_prompt_length or rollout.max_new_tokens",
            ):
                await engine.generate([5] * 500, SamplingParams(max_new_tokens=20))
            return reference, after, info, direct, other, engine.take_metrics()
        finally:
            await engine.close()

    reference, after, info, direct, other, metrics = asyncio.run(scenario())
    assert [c.token_ids for c in after] == [c.token_ids for c in reference]  # nothing lost, same samples
    assert all(c.policy_version == 1 for c in after)
    assert info["weight_version"] == "2"  # never the base model, never the version before
    assert direct["output_ids"] == other["output_ids"] and direct["meta_info"]["weight_version"] == "2"
    assert metrics["rollout/replica_restarts"] == 1 and metrics["rollout/sync_skipped"] == 1
    assert not any(s.alive() for s in engine.fleet.pool.servers)  # torn down by pid
    # rlrm's own engine code in float32 on every replica: `auto` trusts its log-probs as the in-process engine's
    assert info["engine"] == "rlrm-hf" and engine.dtype == "float32"


@pytest.mark.slow
def test_a_replica_that_refuses_the_weights_fails_the_step_by_name(tiny_policy_path, tmp_path):
    other = _variant(tiny_policy_path, tmp_path / "narrow", intermediate_size=256)  # same tokenizer, other shapes
    # servers a user runs for rlrm load weights only from the folder they were started with (--weights-dir)
    extra = ["--threads", "1", "--weights-dir", str(tmp_path / "w")]
    with ServerProcess.on_free_port(lambda port: embedded_server_argv(str(other), "policy", port, extra=extra)) as odd:
        with ServerProcess.on_free_port(
            lambda port: embedded_server_argv(str(tiny_policy_path), "policy", port, extra=extra)
        ) as good:
            engine = _engine(tiny_policy_path, tmp_path / "w", addresses=[good.url, odd.url])

            async def scenario():
                await engine.start()
                try:
                    with pytest.raises(RolloutServerError) as refused:
                        engine.update_weights(_state(tiny_policy_path, 0.01), version=1)
                    return str(refused.value)
                finally:
                    await engine.close()

            message = asyncio.run(scenario())
    assert message.startswith(
        f"rollout replica {odd.url} refused weights version 1: weights not loaded, still version 0"
    )


def test_a_tokenizer_mismatch_is_refused_at_start_naming_both(tiny_policy_path, tmp_path):
    other = _variant(tiny_policy_path, tmp_path / "big-vocab", vocab_size=600)
    with ServerProcess.on_free_port(
        lambda port: embedded_server_argv(str(other), "policy", port, extra=["--threads", "1"])
    ) as server:
        vocab = _vocab_size(tiny_policy_path)
        expect = TrainerModel("tiny:policy", vocab_size=vocab, tokenizer_size=vocab, chat_template_sha256=None)
        engine = _engine(tiny_policy_path, tmp_path / "w", expect=expect, addresses=[server.url])
        with pytest.raises(
            RolloutServerError,
            match=rf"rollout replica {server.url} serves {other} with vocabulary \(embedding "
            rf"rows\) 600, but the trainer's policy tiny:policy has {vocab}",
        ):
            asyncio.run(engine.start())


def test_health_ok_but_no_generate_is_refused_at_start(random_disrm_path, random_disrm_server, tmp_path):
    server = random_disrm_server  # the session's (tests/integration/conftest.py)
    engine = _engine(random_disrm_path, tmp_path, addresses=[server.url])
    with pytest.raises(
        ServerStartError,
        match=rf"rollout.server.addresses\[0\] {server.url} cannot serve the policy: POST /generate answered 404",
    ):
        asyncio.run(engine.start())


@pytest.mark.slow
def test_running_servers_left_with_another_runs_weights_get_the_policys_back(tiny_policy_path, tmp_path):
    extra = ["--threads", "1", "--weights-dir", str(tmp_path)]  # both runs' weights folders are inside it
    with ServerProcess.on_free_port(
        lambda port: embedded_server_argv(str(tiny_policy_path), "policy", port, extra=extra)
    ) as server:
        body = {
            "input_ids": [5, 6, 7],
            "sampling_params": {"max_new_tokens": 6, "sampling_seed": 1},
            "return_logprob": True,
        }
        base = httpx.post(server.url + "/generate", json=body).json()["output_ids"]
        trained = WeightFiles(str(tmp_path / "old")).write(_state(tiny_policy_path, 0.05), version=7)
        assert httpx.post(
            server.url + "/update_weights_from_disk",
            json={"model_path": str(trained), "weight_version": "7"},
            timeout=60,
        ).json()["success"]
        engine = _engine(tiny_policy_path, tmp_path / "w", addresses=[server.url])

        async def scenario():
            await engine.start()
            try:
                return await engine.generate([5, 6, 7], SamplingParams(max_new_tokens=6, seed=1))
            finally:
                await engine.close()

        completion = asyncio.run(scenario())
    assert completion.policy_version == 0 and completion.token_ids == base  # a fresh run starts from the policy itself


def test_a_replica_whose_queue_is_full_is_waited_for_not_failed(tiny_policy_path, tmp_path):
    """More requests than a replica queues (its 503 with Retry-After): the calls wait as asked and all complete,
    counted as rollout/throttled, not as retries; they once used up the 4 attempts in under a second and failed
    the step (a step of over 1,024 requests a replica, at the default --max-queue)."""
    engine = _engine(tiny_policy_path, tmp_path, replicas=1, max_batch=8, extra_args=["--max-queue", "64"])

    async def scenario():
        await engine.start()
        try:
            # 128 requests go as two calls of 64: the second finds the queue full while the first decodes
            sampling = [SamplingParams(max_new_tokens=200, seed=i) for i in range(128)]
            answers = await asyncio.gather(
                *(engine.generate([5, 6, 7 + i % 50], s) for i, s in enumerate(sampling)), return_exceptions=True
            )
            return answers, engine.take_metrics()
        finally:
            await engine.close()

    answers, metrics = asyncio.run(scenario())
    failed = [a for a in answers if isinstance(a, BaseException)]
    assert not failed, f"{len(failed)} of 128 failed: {failed[0]}"
    assert metrics["rollout/throttled"] > 0 and metrics["rollout/retries"] == 0, metrics


def test_a_resumed_run_takes_a_running_server_that_served_it_before(tiny_policy_path, tmp_path):
    """rollout.server.addresses: the server holds the version the run published at its checkpoint (or later);
    the resume's push of that version was refused as not increasing, and the resumed run could not start."""
    weights = tmp_path / "w"
    weights.mkdir()
    extra = ["--threads", "1", "--weights-dir", str(weights)]

    argv_on = lambda port: embedded_server_argv(str(tiny_policy_path), "policy", port, extra=extra)  # noqa: E731
    with ServerProcess.on_free_port(argv_on) as server:
        first = _engine(tiny_policy_path, weights, addresses=[server.url], weights_dir=str(weights))

        async def first_run():
            await first.start()
            for step in (1, 2, 3, 4):  # steps 1-4 published; the run stops after its checkpoint at step 3
                first.update_weights(_state(tiny_policy_path, 0.01 * step), version=step)
            await first.close()

        asyncio.run(first_run())
        resumed = _engine(tiny_policy_path, weights, addresses=[server.url], weights_dir=str(weights))
        resumed.update_weights(_state(tiny_policy_path, 0.03), version=3)  # the checkpoint's, before start

        async def resumed_run():
            await resumed.start()
            try:
                return await resumed.generate([5, 6, 7], SamplingParams(max_new_tokens=4, seed=1))
            finally:
                await resumed.close()

        assert asyncio.run(resumed_run()).policy_version == 3
        assert httpx.get(server.url + "/get_weight_version").json() == {"weight_version": "3"}
