"""The backend registry (rlrm/launch/fleet/backends.py) and the Role enum (rlrm/launch/common/roles.py): each
backend's command line, environment, readiness probe and capabilities, read from one object; nothing started."""

from __future__ import annotations

import json
import os
import sys
from typing import get_args

import pytest
from pydantic import ValidationError

from rlrm.config.servers import RolloutServerConfig, ServerBackend
from rlrm.errors import ConfigError
from rlrm.launch.client.wire import SGLangWire, VllmWire, wire_for
from rlrm.launch.common.auth import ENV_VAR
from rlrm.launch.common.roles import Role
from rlrm.launch.fleet.backends import BACKENDS, VLLM_PLUGIN_DIR, ReplicaLaunch, backend_for
from rlrm.launch.fleet.server_fleet import ServerFleet, fleet_key
from rlrm.launch.fleet.spec import FleetSpec


def test_a_role_reads_and_writes_as_the_string_profiles_use():
    assert Role("disrm") is Role.DISRM and Role(Role.POLICY) is Role.POLICY
    assert f"{Role.GENRM}" == "genrm" and str(Role.POLICY) == "policy" and f"{Role.DISRM:>6}" == " disrm"
    assert json.dumps({"role": Role.DISRM}) == '{"role": "disrm"}'
    assert [r.generates for r in Role] == [True, True, False]
    assert [r.takes_weights for r in Role] == [True, False, False]
    assert [r.metrics_prefix for r in Role] == ["rollout/", "reward/", "reward/"]
    with pytest.raises(ConfigError, match=r"^unknown role 'policy-vllm'; use one of policy, genrm, disrm$"):
        Role.parse("policy-vllm")


def test_each_backend_is_registered_once_and_unknown_ones_are_refused_in_one_line():
    assert list(BACKENDS) == ["embedded", "vllm", "sglang"]
    assert get_args(ServerBackend) == tuple(BACKENDS)  # the profile keys accept exactly the registered backends
    assert all(
        backend_for(name) is BACKENDS[name] and backend_for(BACKENDS[name]) is BACKENDS[name] for name in BACKENDS
    )
    with pytest.raises(ConfigError, match=r"^unknown backend 'trt'; use one of embedded, vllm, sglang$"):
        backend_for("trt")


@pytest.mark.parametrize(
    ("backend", "policy_path"), [("embedded", "/generate"), ("vllm", "/v1/completions"), ("sglang", "/generate")]
)
def test_the_readiness_probe_is_the_backends_endpoint_for_the_role(backend, policy_path):
    engine = backend_for(backend)
    assert engine.probe(Role.POLICY).path == policy_path  # vLLM serves no /generate
    assert engine.probe(Role.GENRM).path == "/v1/chat/completions"
    assert engine.probe(Role.DISRM).path == "/classify"
    if backend == "sglang":  # SGLang's native /classify: an EmbeddingReqInput, `text` or `input_ids`
        assert engine.probe(Role.DISRM).body("rm") == {"text": "ok"}
    else:
        assert engine.probe(Role.DISRM).body("rm") == {"model": "rm", "input": "ok", "use_activation": False}


def test_each_backend_owns_its_classify_request_and_reads_the_same_raw_logit_from_its_answer():
    vllm, sglang = backend_for("vllm"), backend_for("sglang")
    assert backend_for("embedded").classify_body("rm", [1, 2]) == vllm.classify_body("rm", [1, 2])
    assert vllm.classify_body("rm", [[1, 2], [3]]) == {"model": "rm", "input": [[1, 2], [3]], "use_activation": False}
    assert sglang.classify_body("rm", [1, 2]) == {"input_ids": [1, 2]}
    assert sglang.classify_body("rm", [[1, 2], [3]]) == {"input_ids": [[1, 2], [3]]}
    # vLLM with use_activation false: `probs` are the head's raw logits; SGLang's embedding is the same raw logits
    vllm_answer = {"data": [{"index": 0, "probs": [-0.5, 2.25], "num_classes": 2}, {"index": 1, "probs": [None]}]}
    assert vllm.classify_scores(vllm_answer) == [2.25, None]
    assert sglang.classify_scores({"embedding": [-0.5, 2.25], "meta_info": {"id": "a"}}) == [2.25]
    assert sglang.classify_scores([{"embedding": [1.5]}, {"embedding": [-3.0]}]) == [1.5, -3.0]
    for engine, other in ((vllm, {"embedding": [1.0]}), (sglang, vllm_answer)):
        assert not engine.probe(Role.DISRM).answered(other)  # the other backend's shape is no answer
    assert vllm.probe(Role.DISRM).answered(vllm_answer) and sglang.probe(Role.DISRM).answered({"embedding": [0.5]})
    assert "--runner pooling --convert classify" in vllm.probe(Role.DISRM).refused_hint
    assert "--is-embedding" in sglang.probe(Role.DISRM).refused_hint


def test_capabilities_decide_what_differs():
    embedded, vllm, sglang = (backend_for(n) for n in ("embedded", "vllm", "sglang"))
    assert [b.external for b in (embedded, vllm, sglang)] == [False, True, True]
    assert [b.native_generate for b in (embedded, vllm, sglang)] == [True, False, True]
    assert [b.supports_distributed_weight_sync for b in (embedded, vllm, sglang)] == [True, False, True]
    assert [b.needs_gpu for b in (embedded, vllm, sglang)] == [False, False, True]
    assert isinstance(wire_for("embedded"), SGLangWire) and isinstance(wire_for("sglang"), SGLangWire)
    vllm_wire = wire_for(vllm, "tiny:policy")
    assert isinstance(vllm_wire, VllmWire) and vllm_wire.model_name == "tiny:policy"
    # SGLang takes a key only on its command line: a launched fleet gets no fresh key; the others one each
    assert fleet_key(FleetSpec(backend="sglang"), None) is None
    assert fleet_key(FleetSpec(backend="vllm"), None) and fleet_key(FleetSpec(backend="embedded"), None)
    with pytest.raises(ValidationError, match="weight_sync=distributed is not served by vllm"):
        RolloutServerConfig(backend="vllm", weight_sync="distributed")


def test_replica_command_lines_and_environments_from_the_whole_spec():
    spec = FleetSpec(
        section="reward.server", backend="vllm", dtype="bfloat16", max_batch=32, gpu_ids=(2, 3), extra_args=("--x",)
    )
    launch = ReplicaLaunch.of(spec, "disrm", "org/rm", api_key="k", served_model_name="rm")
    argv = launch.argv("127.0.0.1", 8001)
    assert argv[1:] == [
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "org/rm",
        "--host",
        "127.0.0.1",
        "--port",
        "8001",
        "--dtype",
        "bfloat16",
        "--served-model-name",
        "rm",
        "--max-num-seqs",
        "32",
        "--runner",
        "pooling",
        "--convert",
        "classify",
        "--generation-config",  # the model's generation_config.json applies to nothing rlrm sends
        "vllm",
        "--middleware",  # the key on every path but /health (vLLM's own check covers /v1 only)
        "rlrm_vllm_auth.RequireKey",
        "--gpu-memory-utilization",
        "0.85",
        "--x",
    ]
    assert "k" not in argv  # vLLM's key goes in its environment, out of `ps`
    own = ReplicaLaunch.of(spec.__class__(**{**spec.__dict__, "extra_args": ("--generation-config=/g",)}), "disrm", "m")
    assert own.argv("127.0.0.1", 1).count("--generation-config") == 0  # the user's own choice stands
    env = launch.env(1)
    assert env.pop("PYTHONPATH").split(os.pathsep)[0] == VLLM_PLUGIN_DIR  # where it imports the middleware from
    assert env == {ENV_VAR: None, "VLLM_API_KEY": "k", "CUDA_VISIBLE_DEVICES": "3"}
    policy = ReplicaLaunch.of(FleetSpec(threads=2), Role.POLICY, "/m", api_key="k")
    assert policy.argv("127.0.0.1", 9)[1:] == [
        "-m",
        "rlrm.launch.server",
        "--model",
        "/m",
        "--role",
        "policy",
        "--host",
        "127.0.0.1",
        "--port",
        "9",
        "--threads",
        "2",
        "--dtype",
        "float32",
        "--max-batch",
        "64",
        "--api-key-env",
        ENV_VAR,
    ]
    assert policy.argv("h", 9)[0] == sys.executable and policy.env(0) == {ENV_VAR: "k"}


def test_a_port_in_extra_args_is_refused_in_one_line():
    """A `--port` in extra_args wins over the replica's own free port: the engine would listen elsewhere while rlrm
    waits on its own port until start_timeout_s (a taken port: tests/integration/launch/test_taken_ports.py)."""
    spec = FleetSpec(section="reward.server", backend="vllm", extra_args=("--port=8123",))
    with pytest.raises(ConfigError, match=r"^reward.server.extra_args sets --port 8123: rlrm starts .* remove --port"):
        ServerFleet(spec, role="genrm", model_path="unused").argvs()
