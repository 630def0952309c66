"""The actor on N ranks, as the trainer sees it: the `Actor` interface, the work done by rank processes.

    actor = RankGroupActor(ranks, model, profile)     # ranks: RankProcesses or RayRanks, started
    batch.old_log_prob = actor.compute_old_log_prob(batch)
    metrics = actor.update(batch)                      # the same epoch loop as Actor (UpdateLoop)
    engine.update_weights(actor.policy_state_dict(), version=step)   # full tensors, gathered on rank 0
    actor.close()

The trainer process stays the single controller: it generates, scores and keeps the books as with
one rank. Each mini-batch is split across the ranks by whole groups balanced by tokens
(rlrm/engine/actor/shards.py) together with the sizes of the *whole* mini-batch (valid tokens,
valid sequences, width), which every rank's loss divides by; so N ranks take the optimizer step one
rank would take, for every `actor.loss_agg_mode`.

`model` is the trainer's own copy of the policy: after each update the ranks' full weights are
loaded into it (they are handed to the rollout engine anyway), so the HF-format export of a
checkpoint is written from it as with one rank, while each rank writes its shard of the model and
optimizer with torch.distributed.checkpoint (`write_shards`).
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path

import torch

from rlrm.config.schema import Profile
from rlrm.engine.actor.actor import MiniBatchSizes, UpdateLoop
from rlrm.engine.actor.batch import RolloutBatch
from rlrm.engine.actor.rank import RankSpec
from rlrm.engine.actor.shards import gather_rows, split_for_ranks
from rlrm.engine.executor.rank_procs import RankProcesses
from rlrm.engine.executor.ray_ranks import RayRanks
from rlrm.engine.executor.world_size import check_world_size
from rlrm.errors import ConfigError


class RankGroupActor(UpdateLoop):
    """`Actor`'s interface over a started group of ranks.

    Args:
        ranks: RankProcesses or RayRanks (call, call_all, close, world_size, nodes).
        model: the trainer's copy of the policy (receives the ranks' weights after each update).
        profile: the run's profile.
    """

    def __init__(self, ranks, model, profile: Profile):
        self.ranks, self.model, self.cfg = ranks, model, profile.actor
        self.n = profile.rollout.n
        self.world_size = ranks.world_size
        self.has_ref_model = profile.actor.use_kl_loss  # each rank holds its shard of the reference model
        on_gpu = ranks.spec.device == "cuda"
        self._dtype = getattr(torch, profile.model.dtype) if on_gpu else torch.float32
        self.nonfinite_in_row = 0
        self.loss_norm = profile.actor.loss_scale_factor or profile.rollout.max_new_tokens  # see MiniBatchSizes

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the ranks compute in (bf16 under FSDP mixed precision on GPU, fp32 on CPU)."""
        return self._dtype

    @property
    def broken(self) -> str | None:
        """Why the ranks stopped serving (a rank died or failed), or None."""
        return self.ranks.broken

    def compute_old_log_prob(self, batch: RolloutBatch) -> torch.Tensor:
        return self._log_probs("policy", batch)

    def compute_ref_log_prob(self, batch: RolloutBatch) -> torch.Tensor:
        if not self.has_ref_model:
            raise ValueError("the actor has no reference model; build it with one when actor.use_kl_loss is on")
        return self._log_probs("ref", batch)

    def _log_probs(self, which: str, batch: RolloutBatch) -> torch.Tensor:
        shards = split_for_ranks(batch.to("cpu"), self.world_size)
        outs = self.ranks.call("log_probs", [(which, s.batch) for s in shards])
        return gather_rows(outs, shards, len(batch)).to(batch.input_ids.device)  # [B, R]

    def train_mini_batch(self, mb: RolloutBatch) -> dict[str, float]:
        """One optimizer step on every rank, each on its share; the statistics are global (rank 0's)."""
        mb = mb.to("cpu")
        sizes = MiniBatchSizes.of(mb.response_mask, self.loss_norm)
        shards = split_for_ranks(mb, self.world_size)
        stats = self.ranks.call("train", [(s.batch, sizes) for s in shards])[0]
        self.nonfinite_in_row = 0 if not stats["skipped"] else self.nonfinite_in_row + 1
        return stats

    def step_scheduler(self) -> float:
        return self.ranks.call_all("step_scheduler")[0]

    def peak_memory_gb(self) -> float:
        """The largest peak memory of any rank (CUDA allocations on GPU, resident set on CPU)."""
        return max(self.ranks.call_all("peak_memory_gb"))

    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        """The full policy, gathered from the shards on rank 0, loaded into the trainer's copy too."""
        full = self.ranks.call_all("full_state_dict")[0]
        self.model.load_state_dict(full)
        return {k: v.detach() for k, v in self.model.state_dict().items()}

    def state_dict(self) -> dict:
        """Scheduler and counters; the optimizer and model shards go to `write_shards` (same checkpoint)."""
        return {**self.ranks.call_all("trainer_state")[0], "world_size": self.world_size, "sharded": True}

    def write_shards(self, ckpt_dir: Path) -> None:
        """Every rank writes its shard of the model and optimizer under `ckpt_dir/shards` (torch.distributed.checkpoint)."""
        self.ranks.call_all("save", str(shards_dir(ckpt_dir)))

    def load_state_dict(self, state: dict, ckpt_dir: Path | None = None) -> None:
        """Restore a checkpoint written at the same world size (else a ConfigError that says what to set)."""
        saved = int(state.get("world_size", 1)) if state.get("sharded") else 1
        name = Path(ckpt_dir).name if ckpt_dir else "the checkpoint"
        if saved != self.world_size or ckpt_dir is None:
            raise ConfigError(
                f"{name} was written by {saved} actor rank(s) but this run has actor.world_size={self.world_size}; "
                f"resume with actor.world_size={saved} (edit the run folder's config.yaml): optimizer shards are "
                "not resharded across world sizes"
            )
        self.ranks.call_all("load", str(shards_dir(ckpt_dir)), state)
        self.nonfinite_in_row = int(state.get("nonfinite_in_row", 0))

    def close(self) -> None:
        self.ranks.close()


def shards_dir(ckpt_dir: Path) -> Path:
    """Where a checkpoint keeps the ranks' torch.distributed.checkpoint files."""
    return Path(ckpt_dir) / "shards"


SHM = Path("/dev/shm")


def check_shm_room(model, shm: Path = SHM) -> None:
    """ConfigError when /dev/shm cannot hold the policy's state: local ranks pass it through there (torch's shared
    memory) at every weight sync, and a container's default 64 MB failed the first sync with torch's "unable to
    allocate shared memory", naming neither the folder nor the fix."""
    if not shm.is_dir():
        return
    need = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    free = shutil.disk_usage(shm).free
    if free < need:
        raise ConfigError(
            f"{shm} has {free / 2**20:.0f} MiB free and the actor ranks pass the policy's {need / 2**20:.0f} MiB state "
            f"through it at every weight sync: give it more (docker run --shm-size={math.ceil(2 * need / 2**30)}g) "
            "or set actor.world_size=1"
        )


def start_rank_group(profile: Profile, policy_path: str, ref_path: str | None, device: str, model) -> RankGroupActor:
    """Start `actor.world_size` ranks (spawned here, or Ray actors) and return the actor that drives them.

    Args:
        profile: the run's profile.
        policy_path: the HF folder every rank loads the policy from (a checkpoint's model/ on resume).
        ref_path: the reference model's folder, or None without a KL loss.
        device: "cpu" or "cuda" (one GPU per rank).
        model: the trainer's copy of the policy (see RankGroupActor).
    """
    world = profile.actor.world_size
    cores = profile.trainer.num_threads or os.cpu_count() or 1
    threads = 1 if profile.actor.ranks_on == "ray" else max(1, cores // world)  # a Ray rank reserves one CPU
    spec = RankSpec(profile, policy_path, ref_path, world_size=world, device=device, threads=threads)
    ranks: RayRanks | RankProcesses
    if profile.actor.ranks_on == "ray":
        ranks = RayRanks(spec, address=profile.actor.ray_address or profile.reward.ray_address)
    else:
        check_world_size(world, device, key="actor.world_size")
        check_shm_room(model)
        ranks = RankProcesses(spec)
    ranks.start()
    where = ", ".join(f"rank {r} on {node}" for r, node in enumerate(ranks.nodes))
    print(f"actor: {world} ranks ({profile.actor.ranks_on}): {where}", file=sys.stderr, flush=True)
    return RankGroupActor(ranks, model, profile)
