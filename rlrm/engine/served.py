"""`rollout.backend: server`: the rollout engine a profile's `rollout.server` section describes.

engine = served_engine(profile, policy_path, tokenizer, policy)   # not started: the trainer starts it
"""

from __future__ import annotations

from dataclasses import replace

from rlrm.config.schema import Profile
from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.client.rollout_engine import ServerRolloutEngine, TrainerModel
from rlrm.launch.client.wire import wire_for
from rlrm.launch.common.model_info import chat_template_digest
from rlrm.launch.common.roles import Role
from rlrm.launch.fleet.backends import backend_for
from rlrm.launch.fleet.server_fleet import ServerFleet, fleet_key
from rlrm.launch.fleet.spec import FleetSpec


def fleet_spec(profile: Profile) -> FleetSpec:
    """The policy fleet's settings: `rollout.server` with its defaults resolved from the rest of the profile."""
    cfg = profile.rollout.server
    return replace(
        cfg.fleet_spec(),
        max_batch=cfg.max_batch or profile.rollout.max_batch_size,
        dtype=cfg.dtype or profile.model.dtype,
    )


def ray_address(profile: Profile) -> str | None:
    """The Ray cluster servers placed with `launch_on: ray` join when no Ray is initialised yet."""
    return profile.actor.ray_address or profile.reward.ray_address


def served_engine(profile: Profile, policy_path: str, tokenizer, policy) -> ServerRolloutEngine:
    """A ServerRolloutEngine over the policy fleet (launched replicas of `policy_path`, or `addresses`)."""
    cfg = profile.rollout.server
    api_key = fleet_key(cfg.fleet_spec(), cfg.read_api_key())
    fleet = ServerFleet(
        fleet_spec(profile), role=Role.POLICY, model_path=policy_path, api_key=api_key, ray_address=ray_address(profile)
    )
    expect = TrainerModel(
        name=profile.model.path,
        vocab_size=policy.get_input_embeddings().num_embeddings,
        tokenizer_size=len(tokenizer),
        chat_template_sha256=chat_template_digest(tokenizer),
    )
    return ServerRolloutEngine(
        fleet,
        wire_for(fleet.backend, fleet.served_name),  # what launched replicas serve, or served_model_name
        WeightFiles(cfg.weights_dir, config_from=policy_path),
        expect=expect,
        api_key=api_key,
        request_timeout_s=cfg.request_timeout_s,
        sync_timeout_s=cfg.sync_timeout_s,
        max_retries=cfg.max_retries,
        weight_sync=cfg.weight_sync,
        sync_backend=sync_backend(cfg),
        sync_backend_chosen=cfg.weight_sync_backend == "auto",
        policy_device=str(next(policy.parameters()).device),
        keep_fp32=tuple(getattr(policy, "_keep_in_fp32_modules_strict", None) or ()),
        keep_fp32_in_fp16=tuple(getattr(policy, "_keep_in_fp32_modules", None) or ()),
    )


def sync_backend(cfg) -> str:
    """`weight_sync_backend` resolved: auto is nccl when the replicas run on GPUs and the trainer has CUDA, else gloo."""
    if cfg.weight_sync_backend != "auto":
        return cfg.weight_sync_backend
    on_gpus = backend_for(cfg.backend).needs_gpu or bool(cfg.gpu_ids) or cfg.gpus_per_replica > 0
    if not on_gpus:
        return "gloo"
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"
