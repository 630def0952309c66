"""Weight sync on the embedded policy server (real subprocesses): SGLang's /update_weights_from_disk contract,
versions on /generate, the --wait-for-weights gate, and the weight files the trainer writes."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
import torch
from held_ports import reserved_port  # tests/fixtures/held_ports.py

from rlrm.errors import RolloutServerError
from rlrm.inference.weight_files import ServingCast, WeightFiles
from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.process import ServerProcess, embedded_server_argv


@pytest.fixture(scope="module")
def policy_server(tiny_policy_path, tmp_path_factory):
    extra = ["--threads", "1", "--weights-dir", str(tmp_path_factory.getbasetemp())]  # every tmp_path is inside
    with ServerProcess.on_free_port(
        lambda port: embedded_server_argv(str(tiny_policy_path), "policy", port, extra=extra)
    ) as server:
        yield server


@pytest.fixture(scope="module")
def shifted(tiny_policy_path, tmp_path_factory):
    """The tiny policy's weights + 0.05 as a version folder (what the trainer writes after an update)."""
    from safetensors.torch import load_file

    state = load_file(str(Path(tiny_policy_path) / "model.safetensors"))
    files = WeightFiles(str(tmp_path_factory.mktemp("weights")))
    return files.write({k: v + 0.05 for k, v in state.items()}, version=7)


def _generate(url, seed=3, **params):
    body = {
        "input_ids": [5, 6, 7, 8],
        "return_logprob": True,
        "sampling_params": {"temperature": 1.0, "max_new_tokens": 8, "sampling_seed": seed, **params},
    }
    return httpx.post(url + "/generate", json=body, timeout=60).json()


def test_generate_reports_ids_logprobs_and_weight_version(policy_server):
    out = _generate(policy_server.url)
    meta = out["meta_info"]
    assert len(out["output_ids"]) == len(meta["output_token_logprobs"]) == meta["completion_tokens"] <= 8
    assert [e[1] for e in meta["output_token_logprobs"]] == out["output_ids"]
    assert all(e[0] <= 0 for e in meta["output_token_logprobs"]) and meta["weight_version"] == "0"
    assert _generate(policy_server.url)["output_ids"] == out["output_ids"]  # the seed decides the draw
    # SGLang's batch form, one sampling_params per prompt: each answer as if sent alone
    batch = {
        "input_ids": [[5, 6, 7, 8], [9, 10]],
        "return_logprob": True,
        "sampling_params": [
            {"temperature": 1.0, "max_new_tokens": 8, "sampling_seed": 3},
            {"temperature": 1.0, "max_new_tokens": 8, "sampling_seed": 4},
        ],
    }
    both = httpx.post(policy_server.url + "/generate", json=batch, timeout=60).json()
    alone = httpx.post(
        policy_server.url + "/generate",
        json={**batch, "input_ids": [9, 10], "sampling_params": batch["sampling_params"][1]},
    ).json()
    assert both[0]["output_ids"] == out["output_ids"] and both[1]["output_ids"] == alone["output_ids"]
    first = out["output_ids"][0]
    stopped = _generate(policy_server.url, stop_token_ids=[first])
    assert stopped["output_ids"] == [first] and stopped["meta_info"]["finish_reason"]["type"] == "stop"


def test_update_weights_from_disk_loads_and_versions(policy_server, shifted, tmp_path):
    before = _generate(policy_server.url)
    # refused: a folder without weights, and weights of another shape; the replica keeps serving version 0
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = httpx.post(
        policy_server.url + "/update_weights_from_disk", json={"model_path": str(empty)}, timeout=60
    ).json()
    assert refused["success"] is False and "no safetensors" in refused["message"]
    bad = WeightFiles(str(tmp_path)).write({"model.embed_tokens.weight": torch.zeros(3, 3)}, version=9)
    refused = httpx.post(
        policy_server.url + "/update_weights_from_disk", json={"model_path": str(bad)}, timeout=60
    ).json()
    assert refused["success"] is False and "do not fit this model" in refused["message"]
    assert httpx.get(policy_server.url + "/get_model_info").json()["weight_version"] == "0"
    assert _generate(policy_server.url)["output_ids"] == before["output_ids"]  # untouched
    # accepted: SGLang's request and response shapes
    body = {"model_path": str(shifted), "load_format": None, "weight_version": "7", "abort_all_requests": False}
    done = httpx.post(policy_server.url + "/update_weights_from_disk", json=body, timeout=60).json()
    assert done["success"] is True and set(done) == {"success", "message", "num_paused_requests"}
    info = httpx.get(policy_server.url + "/get_model_info").json()
    assert info["weight_version"] == "7" and info["is_generation"] is True and info["max_context_length"] == 512
    assert httpx.get(policy_server.url + "/get_weight_version").json() == {"weight_version": "7"}
    after = _generate(policy_server.url)
    assert after["meta_info"]["weight_version"] == "7"
    assert after["meta_info"]["output_token_logprobs"] != before["meta_info"]["output_token_logprobs"]


def test_a_replica_waiting_for_weights_serves_nothing_until_loaded(tiny_policy_path, shifted):
    extra = ["--threads", "1", "--wait-for-weights", "--weights-dir", str(shifted.parent)]
    # the port is held for the server until it binds it (tests/fixtures/held_ports.py)
    with reserved_port() as port:
        server = ServerProcess(embedded_server_argv(str(tiny_policy_path), "policy", port, extra=extra))
        server.launch()
        try:
            server.wait_listening()
            assert httpx.get(server.url + "/health").status_code == 503  # the router and the balancer keep it out
            assert httpx.post(server.url + "/generate", json={"input_ids": [5]}).status_code == 503
            done = httpx.post(
                server.url + "/update_weights_from_disk",
                json={"model_path": str(shifted), "weight_version": 3},
                timeout=60,
            ).json()
            assert done["success"]
            assert httpx.get(server.url + "/health").status_code == 200
            assert _generate(server.url)["meta_info"]["weight_version"] == "3"
        finally:
            server.stop()


def test_weight_files_are_atomic_versioned_and_cleaned(tmp_path):
    files = WeightFiles(str(tmp_path))
    state = {"a": torch.ones(4), "b": torch.zeros(2, 2)}
    state["tied"] = state["a"]  # tied weights share memory: written as a copy
    v1 = files.write(state, 1)
    v2 = files.write({k: v + 1 for k, v in state.items()}, 2)
    # no temporary folder left; the run's lock (tests/integration/launch/test_orphans.py) stays
    assert sorted(p.name for p in files.root.iterdir()) == [".owner.lock", "v1", "v2"]
    files.keep_only(v2)
    assert sorted(p.name for p in files.root.iterdir()) == [".owner.lock", "v2"] and not v1.exists()
    files.close()
    assert not files.root.exists()


def test_a_full_weights_dir_is_one_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    import rlrm.inference.weight_files as wf

    files = WeightFiles(str(tmp_path))
    monkeypatch.setattr(wf.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10 << 20, 10 << 20, 1 << 10))
    with pytest.raises(
        RolloutServerError, match=r"has 0.0 MiB free but the policy weights need 8.0 MiB \(two versions.*weights_dir"
    ):
        files.write({"w": torch.zeros(1 << 20)}, 1)
    assert [p.name for p in files.root.iterdir()] == [".owner.lock"]  # no version, not even a partial one


def test_room_for_one_version_but_not_the_two_a_sync_holds_is_refused_at_the_first_write(tmp_path, monkeypatch):
    import rlrm.inference.weight_files as wf

    files = WeightFiles(str(tmp_path))
    room = shutil._ntuple_diskusage(100 << 20, 94 << 20, 6 << 20)  # 6 MiB free: one 4-MiB version fits, two do not
    monkeypatch.setattr(wf.shutil, "disk_usage", lambda p: room)
    with pytest.raises(RolloutServerError, match=r"6.0 MiB free but the policy weights need 8.0 MiB \(two versions"):
        files.write({"w": torch.zeros(1 << 20)}, 1)
    monkeypatch.setattr(wf.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(100 << 20, 0, 100 << 20))
    monkeypatch.setattr(wf, "_free_inodes", lambda folder: 0)
    with pytest.raises(RolloutServerError, match=r"has no free inodes left for the policy weights"):
        files.write({"w": torch.zeros(1 << 20)}, 1)
    monkeypatch.setattr(wf, "_free_inodes", lambda folder: 1000)
    files.write({"w": torch.zeros(1 << 20)}, 1)
    monkeypatch.setattr(wf.shutil, "disk_usage", lambda p: room)
    files.write({"w": torch.ones(1 << 20)}, 2)  # later versions need room for one more only
    files.close()


@pytest.mark.slow
def test_a_client_gone_mid_load_leaves_one_whole_version(tiny_policy_path, shifted):
    """Ctrl-C in the trainer while a replica loads: the replica serves the old weights or the new ones, never a mix."""
    argv = embedded_server_argv(str(tiny_policy_path), "policy", free_port(), extra=["--threads", "1"])
    with ServerProcess.movable(argv) as server:
        old = _generate(server.url)
        with pytest.raises(httpx.TimeoutException):  # the client gives up at once, as an interrupted trainer does
            httpx.post(
                server.url + "/update_weights_from_disk",
                json={"model_path": str(shifted), "weight_version": "7"},
                timeout=0.001,
            )
        seen = [_generate(server.url) for _ in range(5)]
        httpx.post(
            server.url + "/update_weights_from_disk",
            json={"model_path": str(shifted), "weight_version": "7"},
            timeout=60,
        )
        new = _generate(server.url)
    for out in seen:
        version = out["meta_info"]["weight_version"]
        assert version in ("0", "7")
        assert (
            out["meta_info"]["output_token_logprobs"]
            == (old if version == "0" else new)["meta_info"]["output_token_logprobs"]
        )


def test_a_tied_embedding_is_written_once_and_the_replica_serves_as_with_both_names(
    policy_server, tiny_policy_path, tmp_path
):
    """The policy ties lm_head to the embeddings: its state_dict lists one tensor under two names. A sync to rlrm's
    own replicas writes (and broadcasts) it once, as save_pretrained does; the replica fills lm_head back in and
    serves exactly what the same weights with both names written give. Other engines get both names."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_policy_path))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.03)
    state = model.state_dict()
    assert state["lm_head.weight"].data_ptr() == state["model.embed_tokens.weight"].data_ptr()
    files = WeightFiles(str(tmp_path))
    both = files.write({k: v.clone() for k, v in state.items()}, version=11)  # every name a tensor of its own
    once = files.write(state, version=12, cast=ServingCast(tied_once=True))  # as to rlrm's own replicas
    with safe_open(str(once / "model.safetensors"), "pt") as f:
        assert "lm_head.weight" not in f.keys() and "model.embed_tokens.weight" in f.keys()
    unique = sum(p.numel() * p.element_size() for p in model.parameters())  # parameters() yields a tied one once
    assert (once / "model.safetensors").stat().st_size < unique * 1.01 < (both / "model.safetensors").stat().st_size
    served = []
    for path, version in ((both, "11"), (once, "12")):
        done = httpx.post(
            policy_server.url + "/update_weights_from_disk",
            json={"model_path": str(path), "weight_version": version},
            timeout=60,
        ).json()
        assert done["success"] is True, done
        out = _generate(policy_server.url, seed=5)
        served.append((out["output_ids"], out["meta_info"]["output_token_logprobs"]))
    assert served[0] == served[1]
