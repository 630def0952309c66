"""Build the parts a profile names: tokenizer, policy, reference, rollout engine, actor, data, reward.

Kept apart from the training loop so that benchmarks and the parity tool build the same parts
the same way.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlrm.config.reward import RewardConfig
from rlrm.config.schema import Profile
from rlrm.engine.actor.base import PolicyActor
from rlrm.engine.agent.engine import AgentEngine, agent_settings
from rlrm.engine.checkpoint import read_reference
from rlrm.engine.data.dataset import load_splits
from rlrm.engine.data.example import Example
from rlrm.engine.data.prompts import check_some_fit
from rlrm.engine.models.tiny import resolve_model_path
from rlrm.engine.reward_service import RewardService
from rlrm.engine.rewards.model_identity import folder_digest
from rlrm.engine.served import ray_address, served_engine
from rlrm.errors import ConfigError
from rlrm.inference.base import RolloutEngine
from rlrm.inference.hf import HFRolloutEngine
from rlrm.inference.loading import eos_token_ids, load_causal_lm, load_tokenizer, pick_device
from rlrm.inference.static_decode import captures_graphs
from rlrm.launch.common import progress


@dataclass
class Components:
    """Every part of a training run, built once by `build_components`."""

    profile: Profile
    tokenizer: Any  # a transformers tokenizer with a chat template and a pad token
    policy: Any  # the actor's model (a transformers causal LM, trained in place)
    engine: RolloutEngine  # holds its own copy of the policy weights
    actor: PolicyActor  # an Actor, or a RankGroupActor when actor.world_size > 1
    train_examples: list[Example]
    test_examples: list[Example]
    reward: RewardService  # started by the trainer
    device: str
    data_info: dict  # skipped_train / skipped_test: bad dataset rows left out
    reference: dict | None = None  # with a KL loss: the reference model's folder and digest (reference.json)


def build_components(profile: Profile, policy_path: str | None = None, checkpoint: Path | None = None) -> Components:
    """Build every part of a training run.

    Args:
        profile: the resolved profile.
        policy_path: load the policy from here instead of `model.path` (resume).
        checkpoint: the checkpoint a resume starts from (its reference.json names the run's reference model).
    """
    import torch

    from rlrm.engine.actor.actor import Actor

    if profile.trainer.num_threads:
        torch.set_num_threads(profile.trainer.num_threads)
    torch.manual_seed(profile.trainer.seed)
    device = pick_device(profile.trainer.device)
    if profile.rollout.compile == "cudagraphs" and not captures_graphs(device):
        raise ConfigError(
            f"rollout.compile=cudagraphs needs a GPU, and this run's device is {device} (trainer.device="
            f"{profile.trainer.device}): set rollout.compile=off (or inductor) on the CPU"
        )
    base_path = resolve_model_path(profile.model.path)
    path = policy_path or base_path
    tokenizer = load_tokenizer(path)
    dtype = profile.model.dtype
    # mixed precision keeps float32 master weights (the optimizer's); the actor computes in `dtype` under autocast.
    # With actor ranks the trainer's copy only receives their weights (handed on to the rollout engine, exported in
    # checkpoints): it stays on the host, not one more policy-sized allocation on the ranks' first GPU.
    home = "cpu" if profile.actor.on_ranks else device
    policy = load_causal_lm(path, "float32" if profile.model.precision == "mixed" else dtype, home)
    ref, ref_path, reference = None, None, None
    if profile.actor.use_kl_loss:
        named = profile.model.ref_path or profile.model.path
        resolved = resolve_model_path(profile.model.ref_path) if profile.model.ref_path else base_path
        ref_path, reference, note = reference_for_resume(
            checkpoint, resolved, f"model.{'ref_path' if profile.model.ref_path else 'path'} {named}"
        )
        if note is not None:
            progress.say(f"note: {note}")
    if ref_path and not profile.actor.on_ranks:  # with ranks, each rank loads its shard of the reference
        ref = load_causal_lm(ref_path, profile.model.dtype, device)
        ref.requires_grad_(False)
    # user tools are imported before anything starts: a broken tool file fails with nothing to stop
    agent = agent_settings(profile) if profile.rollout.agent.enabled else None
    engine: RolloutEngine
    if profile.rollout.backend == "server":  # policy replicas over HTTP (started by the trainer)
        engine = served_engine(profile, path, tokenizer, policy)
    else:
        rollout_copy = copy.deepcopy(policy).to(getattr(torch, dtype))  # cast where the policy is, then moved
        if home != device:
            rollout_copy = rollout_copy.to(device)
        engine = HFRolloutEngine(
            rollout_copy.eval(),
            eos_token_ids=eos_token_ids(tokenizer, policy),
            pad_token_id=tokenizer.pad_token_id,
            max_batch_size=profile.rollout.max_batch_size,
            batch_wait_ms=profile.rollout.batch_wait_ms,
            compile=profile.rollout.compile,
        )
    if agent is not None:  # every generate becomes a multi-turn trajectory with tools
        engine = AgentEngine(engine, tokenizer, agent)
    train, test, info = load_splits(profile.data)  # before the ranks start: a bad dataset fails with nothing to stop
    if profile.data.prompt_too_long == "drop":
        check_some_fit(train, tokenizer, profile.data.max_prompt_length)
    if profile.actor.on_ranks:  # the ranks load their own shards; the trainer keeps a full copy
        from rlrm.engine.actor.group import start_rank_group

        actor: PolicyActor = start_rank_group(profile, path, ref_path, device, policy)
    else:
        actor = Actor(
            policy,
            ref,
            profile.actor,
            temperature=profile.rollout.temperature,
            total_steps=profile.trainer.total_steps,
            n=profile.rollout.n,
            compute_dtype=getattr(torch, dtype),
            response_budget=profile.rollout.max_new_tokens,
        )
    return Components(
        profile,
        tokenizer,
        policy,
        engine,
        actor,
        train,
        test,
        RewardService(
            reward_service_config(profile), profile.trainer.seed, max_response_len=profile.rollout.max_new_tokens
        ),
        device,
        info,
        reference,
    )


def reward_service_config(profile: Profile) -> RewardConfig:
    """The run's reward section with the run's one Ray address, whichever section names it: the reward workers may
    start Ray before the ranks, and a Ray they started at none would have dropped actor.ray_address."""
    return profile.reward.model_copy(update={"ray_address": ray_address(profile)})


def model_reference(folder: str) -> dict | None:
    """What reference.json records of the reference model the run loads from `folder`; None for a hub id (not a
    local folder: transformers resolves it, and rlrm does not pin its snapshot)."""
    if not Path(folder).is_dir():
        return None
    real = Path(folder).resolve()  # a link moved later, or a relative path resumed elsewhere, still names it
    return {"path": str(real), "weights": folder_digest(real)}


def reference_for_resume(ckpt_dir: Path | None, resolved: str, name: str) -> tuple[str, dict | None, str | None]:
    """The folder a run loads its reference model from, what reference.json records of it (`model_reference`),
    and a note when the folder is not `resolved`.

    `model.ref_path` (or `model.path`) is a name (`tiny:policy`, a folder) that an upgrade, another models folder or
    a copy can point at another build (a hub id is not pinned): the KL loss would then pull the policy towards another model, without
    a word (actor/kl_loss 0 -> 2.2 at the first resumed step). The run keeps the reference it was started with,
    from the folder its checkpoint recorded, or is refused in one line when that folder is gone or changed.
    """
    current = model_reference(resolved)
    recorded = read_reference(ckpt_dir) if ckpt_dir is not None else None
    if recorded is None or (current is not None and current["weights"] == recorded["weights"]):
        return resolved, current, None  # a fresh run, an older checkpoint, or the same model
    kept = Path(str(recorded.get("path", "")))
    if kept.is_dir() and folder_digest(kept) == recorded["weights"]:
        note = f"{name} now names {resolved}; the run keeps the reference model it started with, {kept}"
        return str(kept), recorded, note
    raise ConfigError(
        f"{name} now names {resolved}, another model than the run's KL reference ({kept}, which is gone or "
        f"changed): put that model back at {kept} to resume, or start a new run"
    )
