"""Distributed weight sync (`rollout.server.weight_sync: distributed`) against real embedded policy servers:
SGLang's /init_weights_update_group + /update_weights_from_distributed contract over a real gloo group,
refusals that leave the group usable, and a replica killed (-9) while the trainer broadcasts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
import torch
from small_run import SMALL_RUN, as_set_args

from rlrm.config.servers import RolloutServerConfig
from rlrm.inference.base import SamplingParams
from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.client.rollout_engine import ServerRolloutEngine
from rlrm.launch.client.weight_broadcast import WeightBroadcast
from rlrm.launch.client.wire import SGLangWire
from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.process import ServerProcess, embedded_server_argv
from rlrm.launch.fleet.server_fleet import ServerFleet

ARGS = ["--threads", "1", "--weight-sync-timeout-s", "30"]


def _state(model_path, shift):
    from safetensors.torch import load_file

    return {k: v + shift for k, v in load_file(str(Path(model_path) / "model.safetensors")).items()}


def _generate(url, seed=3):
    body = {
        "input_ids": [5, 6, 7, 8],
        "return_logprob": True,
        "sampling_params": {"temperature": 1.0, "max_new_tokens": 8, "sampling_seed": seed},
    }
    out = httpx.post(url + "/generate", json=body, timeout=60).json()
    return (
        out["output_ids"],
        [e[0] for e in out["meta_info"]["output_token_logprobs"]],
        out["meta_info"]["weight_version"],
    )


@pytest.fixture(scope="module")
def two_replicas(tiny_policy_path, tmp_path_factory):
    extra = ARGS + ["--weights-dir", str(tmp_path_factory.getbasetemp())]  # every test's tmp_path is inside
    a = ServerProcess.on_free_port(
        lambda port: embedded_server_argv(str(tiny_policy_path), "policy", port, extra=extra)
    )
    b = ServerProcess.on_free_port(
        lambda port: embedded_server_argv(str(tiny_policy_path), "policy", port, extra=extra)
    )
    with a, b:
        yield a, b


def test_a_broadcast_reaches_both_replicas_as_one_version_and_equals_loading_the_same_weights_from_disk(
    two_replicas, tiny_policy_path, tmp_path
):
    a, b = two_replicas
    base = _generate(a.url)
    sync = WeightBroadcast(SGLangWire(), "gloo", timeout_s=30)
    try:
        assert sync.open([a.url, b.url]) == ({}, None)
        shifted = _state(tiny_policy_path, 0.05)
        assert sync.send(shifted, version=5) == ({}, None)
        on_a, on_b = _generate(a.url), _generate(b.url)
    finally:
        sync.close()
    assert on_a[2] == on_b[2] == "5" and on_a == on_b
    assert on_a[1] != base[1]  # the weights changed
    # the same weights from disk into b: what it generates does not move by a bit
    path = WeightFiles(str(tmp_path)).write(shifted, version=6)
    done = httpx.post(
        b.url + "/update_weights_from_disk", json={"model_path": str(path), "weight_version": "6"}, timeout=60
    )
    assert done.json()["success"] is True
    from_disk = _generate(b.url)
    assert from_disk[:2] == on_a[:2] and from_disk[2] == "6"
    # the group is gone on both: an update now is refused at once, naming what to do
    refused = httpx.post(
        a.url + "/update_weights_from_distributed", json={"names": [], "dtypes": [], "shapes": []}
    ).json()
    assert refused == {
        "success": False,
        "message": "no weight-update group 'weight_update_group': POST /init_weights_update_group first",
    }


def test_a_wrong_name_or_shape_is_refused_and_the_group_stays_usable(two_replicas, tiny_policy_path):
    import torch

    a, b = two_replicas
    before = _generate(a.url)
    sync = WeightBroadcast(SGLangWire(), "gloo", timeout_s=30)
    try:
        assert sync.open([a.url, b.url]) == ({}, None)
        state = _state(tiny_policy_path, 0.02)
        renamed = {("model.embed.weight" if k == "model.embed_tokens.weight" else k): v for k, v in state.items()}
        failures, error = sync.send(renamed, version=8)
        assert error is None and set(failures) == {a.url, b.url}
        assert failures[a.url].startswith(
            f"weights not loaded, still version {before[2]}: the broadcast weights do not "
            "fit this model: missing ['model.embed_tokens.weight'"
        )
        wrong = dict(state, **{"model.norm.weight": torch.ones(7)})
        failures, error = sync.send(wrong, version=8)
        assert error is None and "model.norm.weight has shape (7,), the model's is (" in failures[b.url]
        assert _generate(a.url) == before  # untouched by either
        assert sync.send(state, version=9) == ({}, None)  # every tensor was received both times: still in step
        assert _generate(a.url)[2] == _generate(b.url)[2] == "9"
    finally:
        sync.close()


def test_a_master_host_that_does_not_resolve_is_refused_at_once_naming_it(two_replicas):
    # before: the replica's store retried the name until --weight-sync-timeout-s (30 s here; 300 by default)
    from rlrm.errors import RolloutServerError
    from rlrm.launch.common.weight_group import resolve_master

    a, _ = two_replicas
    # the lookup's own time on this machine, which the replica waits too: at once where DNS answers, 10 s (glibc's
    # 5-s timeout, tried twice) where the resolver in /etc/resolv.conf never answers
    start = time.monotonic()
    with pytest.raises(RolloutServerError, match="does not resolve"):
        resolve_master("no-such-trainer.invalid")
    lookup_s = time.monotonic() - start
    body = {"master_address": "no-such-trainer.invalid", "master_port": free_port(), "rank_offset": 1}
    start = time.monotonic()
    out = httpx.post(
        a.url + "/init_weights_update_group", json={**body, "world_size": 2, "backend": "gloo"}, timeout=60
    )
    elapsed = time.monotonic() - start
    assert out.status_code == 200 and out.json()["success"] is False, out.text
    message = out.json()["message"]
    assert "master host 'no-such-trainer.invalid' does not resolve" in message and "\n" not in message, message
    assert elapsed < lookup_s + 30 / 3  # the lookup, not the group's 30-s timeout
    assert _generate(a.url)[2] is not None  # the replica still serves, and can join a group (the next tests)


def test_distributed_sync_is_refused_with_vllm_in_one_line_and_sets_the_replicas_timeout():
    from pydantic import ValidationError

    with pytest.raises(
        ValidationError,
        match=r"weight_sync=distributed is not served by vllm .*use "
        r"rollout.server.weight_sync=disk",
    ):
        RolloutServerConfig(backend="vllm", weight_sync="distributed")
    assert RolloutServerConfig().weight_sync == "disk" and RolloutServerConfig().weight_sync_backend == "auto"
    # launched embedded replicas get the group's timeout; disk sync adds nothing
    cfg = RolloutServerConfig(weight_sync="distributed", sync_timeout_s=42)
    assert ServerFleet(cfg.fleet_spec(), role="policy", model_path="m").extra_args()[-2:] == [
        "--weight-sync-timeout-s",
        "42",
    ]
    assert (
        "--weight-sync-timeout-s"
        not in ServerFleet(RolloutServerConfig().fleet_spec(), role="policy", model_path="m").extra_args()
    )


@pytest.mark.slow
def test_kill_9_of_one_of_two_replicas_with_distributed_sync(tiny_policy_path, tmp_path):
    """A replica dies mid-run: nothing lost, it comes back only with the current weights, and later broadcasts reach both."""
    cfg = RolloutServerConfig(router="client", threads=1, replicas=2, weight_sync="distributed", sync_timeout_s=30)
    fleet = ServerFleet(cfg.fleet_spec(), role="policy", model_path=str(tiny_policy_path))
    engine = ServerRolloutEngine(
        fleet,
        SGLangWire(),
        WeightFiles(str(tmp_path)),
        request_timeout_s=60,
        sync_timeout_s=30,
        weight_sync="distributed",
        sync_backend="gloo",
    )
    prompts = [[5, 6, 7 + i] for i in range(16)]
    sampling = [SamplingParams(max_new_tokens=8, seed=i) for i in range(16)]

    async def wait_for(check, what, timeout_s=120):
        deadline = time.monotonic() + timeout_s
        while not check():
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.05)

    async def scenario():
        await engine.start()
        try:
            engine.update_weights(_state(tiny_policy_path, 0.05), version=1)
            reference = await asyncio.gather(*(engine.generate(p, s) for p, s in zip(prompts, sampling)))
            victim, survivor = engine.fleet.pool.servers
            victim.kill()  # kill -9 of its process group
            await wait_for(lambda: not victim.alive(), "the killed replica stayed alive", 10)
            after = await asyncio.gather(*(engine.generate(p, s) for p, s in zip(prompts, sampling)))
            # still down (a restart takes seconds: python, torch, the model): left out of the group
            engine.update_weights(_state(tiny_policy_path, 0.07), version=2)
            first = engine.take_metrics()
            await wait_for(
                lambda: victim.url in engine.broadcast.awaiting, "the restarted replica never waited for weights"
            )
            waiting = [
                httpx.get(victim.url + "/health").status_code,
                httpx.post(victim.url + "/generate", json={"input_ids": [5]}).status_code,
            ]
            await asyncio.to_thread(
                engine.update_weights, _state(tiny_policy_path, 0.09), 3
            )  # the group rebuilt with it
            await wait_for(lambda: httpx.get(victim.url + "/health").status_code == 200, "it never came back")
            served = [_generate(victim.url), _generate(survivor.url)]
            await asyncio.to_thread(engine.update_weights, _state(tiny_policy_path, 0.11), 4)  # no rebuild: both in it
            later = [_generate(victim.url), _generate(survivor.url)]
            return reference, after, first, waiting, served, later, engine.take_metrics()
        finally:
            await engine.close()

    reference, after, first, waiting, served, later, metrics = asyncio.run(scenario())
    assert [c.token_ids for c in after] == [c.token_ids for c in reference]  # nothing lost, same samples
    assert all(c.policy_version == 1 for c in after)
    assert first["rollout/sync_skipped"] == 1
    assert waiting == [503, 503]  # restarted: never serves the base model (or version 1) while it waits
    assert served[0] == served[1] and served[0][2] == "3"
    assert later[0] == later[1] and later[0][2] == "4" and later[0][1] != served[0][1]
    assert (
        first["rollout/replica_restarts"] + metrics["rollout/replica_restarts"] == 1
        and metrics["rollout/sync_skipped"] == 0
    )
    assert metrics["timing_s/weight_broadcast"] > 0 and metrics["timing_s/weight_write"] == 0
    assert not any(s.alive() for s in engine.fleet.pool.servers)  # torn down by pid


def test_a_failed_distributed_sync_shows_rlrm_s_line_and_no_c10d_warnings(tmp_path, tiny_policy_path):
    """Through the real `rlrm` command: before, two raw `[W ... socket.cpp] [c10d] waitForInput ...` lines from
    the trainer's TCPStore came first on stderr; the group join fails here because the replicas get 1 ms."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[3]
    sets = [
        "rollout.backend=server",
        "rollout.server.router=client",
        "rollout.server.threads=1",
        "rollout.server.replicas=2",
        "rollout.server.weight_sync=distributed",
        "rollout.server.sync_timeout_s=0.001",  # too short for anything to join, however idle the machine
        f"rollout.server.weights_dir={tmp_path / 'w'}",
        *SMALL_RUN,
        "data.train_batch_size=2",
        "actor.mini_batch_size=2",
        "trainer.val_before_train=false",
    ]
    argv = [sys.executable, "-m", "rlrm", "train", "--profile", "tiny-rule", "--console", "none", "--steps", "1"]
    argv += ["--out", str(tmp_path / "run"), *as_set_args(*sets)]
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_CPP_LOG_LEVEL", "RLRM_DEBUG")}
    env.update(PYTHONPATH=str(repo), OMP_NUM_THREADS="1")
    done = subprocess.run(argv, env=env, cwd=repo, capture_output=True, text=True, timeout=300)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 1, lines
    assert not [line for line in lines if "c10d" in line or line.startswith("[W")], lines
    assert len(lines) == 1 and lines[0].startswith("error: rollout replica "), lines  # could not join, or refused
    assert not (tmp_path / "run").exists()


def test_the_trainers_store_listens_before_any_replica_is_told_its_port():
    """The group's port is the one the trainer's store already listens on (the OS picks it): no other process can
    take it between the pick and the bind, as it could when a port picked free was bound later (issue seen with a
    server's port in CI at 2002b91)."""
    import datetime

    import torch.distributed as dist

    from rlrm.launch.common.ports import port_taken
    from rlrm.launch.common.weight_group import host_store

    store = host_store("127.0.0.1", world_size=2, timeout_s=5)
    assert store.port > 0 and port_taken("127.0.0.1", store.port)
    member = dist.TCPStore("127.0.0.1", store.port, 2, is_master=False, timeout=datetime.timedelta(seconds=5))
    member.set("hello", "trainer")
    assert store.get("hello") == b"trainer"


def _launched_engine(tiny_policy_path, tmp_path, sync="distributed"):
    cfg = RolloutServerConfig(router="client", threads=1, replicas=1, weight_sync=sync, sync_timeout_s=30)
    fleet = ServerFleet(cfg.fleet_spec(), role="policy", model_path=str(tiny_policy_path))
    files = WeightFiles(str(tmp_path))
    engine = ServerRolloutEngine(
        fleet, SGLangWire(), files, request_timeout_s=60, sync_timeout_s=30, weight_sync=sync, sync_backend="gloo"
    )
    return engine, files


@pytest.mark.parametrize("sync", ["distributed", "disk"])
def test_a_request_made_during_a_sync_is_served_by_the_version_before(tiny_policy_path, tmp_path, sync):
    """Fully-async and one-step-off generate while the trainer thread publishes: a request sent meanwhile carries
    the version before, which the replicas still hold, so it is answered, not refused as stale until it fails."""
    engine, _ = _launched_engine(tiny_policy_path, tmp_path, sync)
    name = "send" if sync == "distributed" else "push_all"

    async def scenario():
        await engine.start()
        loop, seen = asyncio.get_running_loop(), {}
        holder_now = engine.broadcast if sync == "distributed" else engine.disk
        real = getattr(holder_now, name)

        def during(*args, **kwargs):
            request = engine.generate([5, 6, 7], SamplingParams(max_new_tokens=4, seed=1))
            seen["completion"] = asyncio.run_coroutine_threadsafe(request, loop).result(timeout=60)
            return real(*args, **kwargs)

        setattr(holder_now, name, during)
        try:
            await asyncio.to_thread(engine.update_weights, _state(tiny_policy_path, 0.05), 1)
            return seen["completion"], engine.take_metrics(), engine.version
        finally:
            await engine.close()

    completion, metrics, version = asyncio.run(scenario())
    assert completion.policy_version == 0 and version == 1
    assert metrics["rollout/stale_refused"] == 0 and metrics["rollout/retries"] == 0


def test_weights_written_before_the_first_broadcast_are_deleted_after_it(tiny_policy_path, tmp_path):
    """A resume publishes the checkpoint's weights before the engine starts (written, the replicas start from them);
    once broadcasts carry the weights no replica reads that file: it must not hold a copy of the policy in the
    weights folder (RAM under /dev/shm) for the rest of the run."""
    from safetensors.torch import load_file

    engine, files = _launched_engine(tiny_policy_path, tmp_path)
    base = load_file(str(Path(tiny_policy_path) / "model.safetensors"))

    async def scenario():
        engine.update_weights({k: v + 0.01 for k, v in base.items()}, 3)  # the resume's publish, before start
        await engine.start()
        try:
            written = sorted(p.parent.name for p in files.root.rglob("*.safetensors"))
            for v in (4, 5):
                await asyncio.to_thread(engine.update_weights, {k: t + 0.01 * v for k, t in base.items()}, v)
            return written, sorted(p.parent.name for p in files.root.rglob("*.safetensors")), engine.version
        finally:
            await engine.close()

    written, left, version = asyncio.run(scenario())
    assert written == ["v3"] and version == 5
    assert left == [], f"a copy of the policy stayed in the weights folder after broadcasts 4 and 5: {left}"


@pytest.mark.parametrize("sync", ["disk", "distributed"])
def test_fp32_weights_reach_bf16_replicas_in_bf16_and_serve_as_if_sent_in_fp32(tiny_policy_path, tmp_path, sync):
    """Mixed precision keeps fp32 master weights; a replica serving bf16 rounds them on load. Sent (written or
    broadcast) already in bf16 they take half the bytes and land the same: a replica fed the fp32 tensors serves
    the very same tokens and log-probs."""
    cfg = RolloutServerConfig(
        router="client", threads=1, replicas=1, weight_sync=sync, sync_timeout_s=30, dtype="bfloat16"
    )
    fleet = ServerFleet(cfg.fleet_spec(), role="policy", model_path=str(tiny_policy_path))
    files = WeightFiles(str(tmp_path))
    engine = ServerRolloutEngine(
        fleet, SGLangWire(), files, request_timeout_s=60, sync_timeout_s=30, weight_sync=sync, sync_backend="gloo"
    )
    state = _state(tiny_policy_path, 0.013)
    sent: list = []

    async def scenario():
        from safetensors.torch import load_file

        await engine.start()
        try:
            if sync == "distributed":  # the dtypes announced to the replicas, as each tensor is cast
                group = engine.broadcast.group
                real = group.send

                def send(sd, v, cast):
                    sent.append({k: cast.target(k, t) for k, t in sd.items()})
                    return real(sd, v, cast)

                group.send = send
            await asyncio.to_thread(engine.update_weights, state, 1)
            if sync == "disk":
                sent.append({k: t.dtype for k, t in load_file(str(files.current / "model.safetensors")).items()})
            return await engine.generate([5, 6, 7, 8], SamplingParams(max_new_tokens=6, seed=4))
        finally:
            await engine.close()

    served = asyncio.run(scenario())
    assert sent and set(sent[0].values()) == {torch.bfloat16}
    extra = ["--threads", "1", "--dtype", "bfloat16", "--weights-dir", str(tmp_path)]
    with ServerProcess.on_free_port(
        lambda port: embedded_server_argv(str(tiny_policy_path), "policy", port, extra=extra)
    ) as reference:
        path = WeightFiles(str(tmp_path)).write(state, 1)  # fp32, rounded by the replica on load
        body = {"model_path": str(path), "weight_version": "1"}
        assert httpx.post(reference.url + "/update_weights_from_disk", json=body, timeout=60).json()["success"]
        body = {
            "input_ids": [5, 6, 7, 8],
            "return_logprob": True,
            "sampling_params": {"temperature": 1.0, "max_new_tokens": 6, "sampling_seed": 4},
        }
        out = httpx.post(reference.url + "/generate", json=body, timeout=60).json()
    assert served.token_ids == out["output_ids"]
    assert served.log_probs == [e[0] for e in out["meta_info"]["output_token_logprobs"]]
