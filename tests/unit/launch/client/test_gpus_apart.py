"""An NCCL weight-update group needs a GPU per member: NCCL refuses two on one ("Duplicate GPU detected"). The
trainer compares its GPU with each replica's (`/get_model_info`'s `gpu_uuid`) before the group forms: where
`weight_sync_backend: auto` chose nccl it broadcasts over gloo instead, saying so; where nccl was named, one line
says what to change (rlrm/launch/client/weight_broadcast.py)."""

from __future__ import annotations

import pytest

from rlrm.config.servers import RolloutServerConfig
from rlrm.errors import RolloutServerError
from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.client import weight_broadcast
from rlrm.launch.client.rollout_engine import ServerRolloutEngine
from rlrm.launch.client.weight_broadcast import gpus_shared
from rlrm.launch.client.wire import SGLangWire
from rlrm.launch.fleet.server_fleet import ServerFleet

A, B = "http://127.0.0.1:31001", "http://127.0.0.1:31002"


def test_the_first_two_members_on_one_gpu_are_named():
    assert gpus_shared({"the trainer": "GPU-0", "replica a": "GPU-1", "replica b": "GPU-2"}) is None
    assert gpus_shared({"the trainer": "GPU-0", "replica a": "GPU-1", "replica b": "GPU-0"}) == (
        "the trainer",
        "replica b",
    )
    assert gpus_shared({"the trainer": "GPU-0", "replica a": "GPU-1", "replica b": "GPU-1"}) == (
        "replica a",
        "replica b",
    )
    assert gpus_shared({"the trainer": None, "replica a": None, "replica b": None}) is None  # not on GPUs


def _engine(tmp_path, backend: str, chosen: bool, policy_device: str | None = None) -> ServerRolloutEngine:
    cfg = RolloutServerConfig(weight_sync="distributed", weight_sync_backend="auto" if chosen else backend)
    fleet = ServerFleet(cfg.fleet_spec(), role="policy", model_path="m")
    return ServerRolloutEngine(
        fleet,
        SGLangWire(),
        WeightFiles(str(tmp_path)),
        weight_sync="distributed",
        sync_backend=backend,
        sync_backend_chosen=chosen,
        policy_device=policy_device,
    )


@pytest.fixture()
def on_gpu_0(monkeypatch):
    """The trainer's thread on cuda:0, whose UUID is GPU-0 (no CUDA here: both answers stand in for it)."""
    monkeypatch.setattr(weight_broadcast, "trainer_device", lambda policy_device=None: "cuda:0")
    monkeypatch.setattr(weight_broadcast, "gpu_uuid", {"cuda:0": "GPU-0"}.__getitem__)


def test_auto_broadcasts_over_gloo_when_a_replica_is_on_the_trainers_gpu(tmp_path, on_gpu_0, capsys):
    engine = _engine(tmp_path, "nccl", chosen=True)
    engine.replica_gpus = {A: "GPU-1", B: "GPU-0"}
    engine._check_gpus_apart()
    assert engine.broadcast.group.backend == "gloo"
    assert engine.broadcast.group.device == "cuda:0"  # the GPU compared is the one the group would join on
    assert capsys.readouterr().err.strip() == (
        f"warning: rollout.server: the trainer and replica {B} are on one GPU, and NCCL refuses two members of a group on "
        "one GPU: the weights are broadcast over gloo (through CPU copies) instead"
    )


def test_nccl_named_with_two_replicas_on_one_gpu_is_one_line_naming_what_to_change(tmp_path, on_gpu_0):
    engine = _engine(tmp_path, "nccl", chosen=False)
    engine.replica_gpus = {A: "GPU-1", B: "GPU-1"}
    with pytest.raises(RolloutServerError) as err:
        engine._check_gpus_apart()
    assert str(err.value) == (
        f"rollout.server.weight_sync_backend=nccl: replica {A} and replica {B} are on one GPU, and NCCL refuses "
        "two members of a group on one GPU: give each replica a GPU of its own (rollout.server.gpu_ids) or set "
        "rollout.server.weight_sync_backend=gloo"
    )
    assert engine.broadcast.group.backend == "nccl"


@pytest.mark.parametrize("chosen", [True, False])
def test_a_gpu_for_each_member_keeps_nccl(tmp_path, on_gpu_0, chosen, capsys):
    engine = _engine(tmp_path, "nccl", chosen=chosen)
    engine.replica_gpus = {A: "GPU-1", B: "GPU-2"}
    engine._check_gpus_apart()
    assert engine.broadcast.group.backend == "nccl" and capsys.readouterr().err == ""
    assert engine.broadcast.group.device == "cuda:0"  # joined there, whichever thread joins


def test_nccl_joins_on_the_policys_gpu_not_the_current_one(monkeypatch):
    """trainer.device=cuda:1: the weights are there, so the group joins there (no copy to cuda:0 each sync), and
    that GPU is the one compared with the replicas'."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)  # the trainer never set another
    assert weight_broadcast.trainer_device("cuda:1") == "cuda:1"
    assert weight_broadcast.trainer_device("cuda") == "cuda:0"  # plain cuda is the current one
    assert weight_broadcast.trainer_device("cpu") == "cuda:0"  # a CPU policy: its weights are copied there
    assert weight_broadcast.trainer_device(None) == "cuda:0"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert weight_broadcast.trainer_device("cpu") is None


def test_a_replica_on_the_current_gpu_is_apart_from_a_policy_on_another(tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(weight_broadcast, "gpu_uuid", {"cuda:0": "GPU-0", "cuda:1": "GPU-1"}.__getitem__)
    engine = _engine(tmp_path, "nccl", chosen=False, policy_device="cuda:1")
    engine.replica_gpus = {A: "GPU-0"}  # rollout.server.gpu_ids: [0], the policy on cuda:1
    engine._check_gpus_apart()
    assert engine.broadcast.group.backend == "nccl" and capsys.readouterr().err == ""
    assert engine.broadcast.group.device == "cuda:1"


def test_gloo_is_not_checked(tmp_path, on_gpu_0):
    engine = _engine(tmp_path, "gloo", chosen=False)
    engine.replica_gpus = {A: "GPU-0", B: "GPU-0"}  # gloo copies through the CPU: members may share a GPU
    engine._check_gpus_apart()
    assert engine.broadcast.group.backend == "gloo"


def test_the_server_reports_no_gpu_off_cuda():
    from rlrm.launch.common.model_info import gpu_uuid

    assert gpu_uuid("cpu") is None and gpu_uuid("meta") is None


def test_precision_names_float32_in_tf32_on_cuda_only():
    """rlrm.inference.tf32.precision: what the engine and the actor are compared by (rlrm/engine/behaviour.py)."""
    import torch

    from rlrm.inference.tf32 import cuda_tf32_on, precision

    assert precision(torch.float32, "cuda:0") == torch.float32  # torch's default: plain float32 products
    global_before = torch.get_float32_matmul_precision()
    matmul = torch.backends.cuda.matmul
    flags_before = matmul.fp32_precision  # the older flag raises when read after another test set the newer API
    put_back = cuda_tf32_on()
    try:
        assert precision(torch.float32, "cuda:0") == "tf32"
        assert precision(torch.float32, torch.device("cuda")) == "tf32"
        assert precision(torch.float32, "cpu") == torch.float32  # the CPU does not read the setting
        assert precision(torch.bfloat16, "cuda:0") == torch.bfloat16  # nor bf16 compute
        # still readable the old way: TorchInductor reads it when it compiles a matrix product
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        put_back()
    assert precision(torch.float32, "cuda:0") == torch.float32
    assert torch.get_float32_matmul_precision() == global_before
    assert matmul.fp32_precision == flags_before  # "none" stays "none", not "ieee"
