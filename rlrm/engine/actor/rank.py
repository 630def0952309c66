"""One training rank: the actor's code on this rank's share of each mini-batch, the model sharded by FSDP2.

    worker = RankWorker(RankSpec(profile, policy_path, world_size=2))   # in the rank's own process
    worker.setup(rank=0, local_rank=0, master="10.0.0.1", port=29500)    # process group, models, FSDP2
    stats = worker.train(shard, sizes)                                   # one optimizer step, every rank
    full = worker.full_state_dict()                                      # rank 0: full tensors; others: None

A rank runs the same `Actor` code as the single-process path. What differs is said by `RankActor`:
the loss of each micro-batch is weighted by its share of the *whole* mini-batch (sizes handed down
by the controller), scaled by the world size (FSDP averages gradients over ranks, the sum is
wanted), the metric sums are all-reduced, and the gradient norm is the global one (a DTensor norm).

Each decoder layer is its own FSDP2 unit, then the root (embeddings, final norm, head); on GPU the
parameters are gathered in bf16 and gradients reduced in fp32 (master weights stay fp32), on CPU
everything is fp32. The controller side is `rlrm.engine.actor.group`; the processes that run this
are `rlrm.engine.executor.rank_procs` (spawn) and `rlrm.engine.executor.ray_ranks` (Ray actors).

This module imports torch: import it inside functions.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist

from rlrm.config.schema import Profile
from rlrm.engine.actor.actor import Actor, MiniBatchSizes
from rlrm.engine.actor.batch import RolloutBatch
from rlrm.engine.actor.logprobs import response_log_probs
from rlrm.inference.loading import load_causal_lm
from rlrm.inference.tf32 import cuda_tf32_on

# in a shard folder: the optimizer had not stepped when it was saved (see RankWorker.save)
EMPTY_OPTIMIZER = "optimizer_empty"


@dataclass
class RankSpec:
    """What every rank needs to build its part of the actor.

    Attributes:
        profile: the run's profile (actor, model, rollout, trainer sections are read).
        policy_path: the policy's HF folder (the base model, or a checkpoint's model/ on resume).
        ref_path: the reference model's folder (None without a KL loss).
        world_size: ranks in the group.
        device: "cpu" or "cuda".
        threads: torch CPU threads per rank (0: leave torch's default).
    """

    profile: Profile
    policy_path: str
    ref_path: str | None
    world_size: int
    device: str
    threads: int = 0

    def worker_class(self) -> type:
        """What each rank runs (the executor builds it as `worker_class()(spec)` on the rank)."""
        return RankWorker


class RankActor(Actor):
    """The actor on one rank: `Actor` with global loss normalisation and reductions over ranks."""

    def __init__(self, *args, world_size: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.grad_scale = float(world_size)
        self.share_prompts = True  # the same forward passes on every rank, whatever its rows
        self.sizes: MiniBatchSizes | None = None  # of the whole mini-batch, set before each step

    def train_shard(self, shard: RolloutBatch, sizes: MiniBatchSizes) -> dict[str, float]:
        self.sizes = sizes
        return self.train_mini_batch(shard)

    def mini_batch_sizes(self, mb: RolloutBatch) -> MiniBatchSizes:
        if self.sizes is None:  # train_shard sets them before every step
            raise RuntimeError("a rank's mini-batch sizes are read before train_shard set them")
        return self.sizes

    def reduce_sums(self, sums: dict[str, float]) -> dict[str, float]:
        keys = sorted(sums)
        device = next(self.model.parameters()).device
        values = torch.tensor([sums[k] for k in keys], dtype=torch.float64, device=device)
        dist.all_reduce(values)
        return dict(zip(keys, values.tolist()))

    def clip_grad_norm(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip)
        if hasattr(norm, "full_tensor"):  # a DTensor: the norm over every rank's shards
            norm = norm.full_tensor()
        return norm.item()


class RankWorker:
    """The body of one rank process (spawned, or a Ray actor): set up, then answer the controller's calls."""

    def __init__(self, spec: RankSpec):
        self.spec = spec
        self.rank = -1
        self._actor: RankActor | None = None  # `actor`, built by setup()
        self._store: Any = None  # the rendezvous store, on the rank that `address` was asked of

    @property
    def actor(self) -> RankActor:
        """This rank's actor (built by `setup`)."""
        if self._actor is None:
            raise RuntimeError("this rank has no actor before setup()")
        return self._actor

    def address(self) -> tuple[str, int]:
        """This node's address and the port of the rendezvous store this rank now holds (rank 0's is the ranks'
        rendezvous point): the store listens on a port the OS picked, so no other process can take it between the
        pick and `setup` (a port picked free and bound later can be lost on a busy node)."""
        from rlrm.launch.common.weight_group import host_store

        host = _node_ip()
        self._store = host_store(host, self.spec.world_size, self.spec.profile.actor.collective_timeout_s)
        return host, self._store.port

    def setup(self, rank: int, local_rank: int, master: str, port: int) -> str:
        """Join the process group, load and shard the models, build the optimizer; returns this node's name."""
        spec, profile = self.spec, self.spec.profile
        self.rank = rank
        if spec.threads:
            torch.set_num_threads(spec.threads)
        torch.manual_seed(profile.trainer.seed)
        if profile.model.tf32:
            cuda_tf32_on()  # the rank's process is the run's: nothing to put back
        if spec.device == "cuda":
            torch.cuda.set_device(local_rank)
        device = torch.device(f"cuda:{local_rank}") if spec.device == "cuda" else torch.device("cpu")
        # rank 0 on Ray holds the store it named in `address` (under the prefix torch gives a tcp:// rendezvous's);
        # the others, and local ranks, reach it by address
        where: dict[str, Any] = {"init_method": f"tcp://{master}:{port}"}
        if self._store is not None:
            where = {"store": dist.PrefixStore("default_pg", self._store)}
        dist.init_process_group(
            "nccl" if spec.device == "cuda" else "gloo",
            rank=rank,
            world_size=spec.world_size,
            timeout=timedelta(seconds=profile.actor.collective_timeout_s),
            **where,
        )
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device.type, (spec.world_size,))
        # fp32 master weights, computed in model.dtype by FSDP2's mixed precision; model.precision=pure on a GPU
        # keeps the weights themselves in model.dtype
        pure = spec.device == "cuda" and profile.model.precision == "pure"
        master = profile.model.dtype if pure else "float32"
        policy = load_causal_lm(spec.policy_path, master, str(device))
        shard_model(policy, mesh, spec.device, master if pure else profile.model.dtype)
        ref = None
        if spec.ref_path is not None:
            ref = load_causal_lm(spec.ref_path, master, str(device))
            ref.requires_grad_(False)
            shard_model(ref, mesh, spec.device, master if pure else profile.model.dtype)
        self._actor = RankActor(
            policy,
            ref,
            profile.actor,
            temperature=profile.rollout.temperature,
            total_steps=profile.trainer.total_steps,
            n=profile.rollout.n,
            world_size=spec.world_size,
        )
        self.device = device
        return _node_name()

    def log_probs(self, which: str, shard: RolloutBatch) -> torch.Tensor:
        """Log-probs [rows, R] of the shard under the policy (`which="policy"`) or the reference."""
        model = self.actor.model if which == "policy" else self.actor.ref_model
        model.eval()
        with torch.no_grad():
            out = response_log_probs(
                model,
                shard.to(self.device),
                self.actor.temperature,
                self.actor.cfg.micro_batch_size,
                share_prompts=True,
                chunk_tokens=self.actor.cfg.logits_chunk_tokens,  # as the in-process actor and the update do
            )
        return out[0].cpu()

    def train(self, shard: RolloutBatch, sizes: MiniBatchSizes) -> dict[str, float]:
        """One optimizer step on this rank's share of a mini-batch (statistics are global, equal on every rank)."""
        return self.actor.train_shard(shard.to(self.device), sizes)

    def step_scheduler(self) -> float:
        return self.actor.step_scheduler()

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The whole policy as full CPU tensors on rank 0 (None elsewhere); every rank must call it."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        full = get_model_state_dict(self.actor.model, options=options)
        return cast("dict[str, torch.Tensor]", full) if self.rank == 0 else None  # full_state_dict: tensors only

    def trainer_state(self) -> dict:
        """Scheduler and non-finite counter (the same on every rank; the optimizer goes to `save`)."""
        return {"scheduler": self.actor.scheduler.state_dict(), "nonfinite_in_row": self.actor.nonfinite_in_row}

    def save(self, folder: str) -> None:
        """Write the sharded policy and optimizer state with torch.distributed.checkpoint (every rank its shard).

        An optimizer that has not stepped yet (every mini-batch so far skipped) has no state, and `get_state_dict`
        makes it one by stepping at lr 0: Adam's step count became 1 and every later update differed from a run
        that saved nothing. That state is saved (the checkpoint's layout stays one), then taken back, and the
        folder says so (EMPTY_OPTIMIZER) for `load` to take it back too."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        empty = not self.actor.optimizer.state
        model_sd, optim_sd = get_state_dict(self.actor.model, self.actor.optimizer)
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=folder)
        if empty:
            self.actor.optimizer.state.clear()
            if self.rank == 0:
                (Path(folder) / EMPTY_OPTIMIZER).touch()

    def load(self, folder: str, state: dict) -> None:
        """Restore what `save` and `trainer_state` wrote."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_sd, optim_sd = get_state_dict(self.actor.model, self.actor.optimizer)
        loaded: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
        dcp.load(loaded, checkpoint_id=folder)
        set_state_dict(
            self.actor.model, self.actor.optimizer, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"]
        )
        if (Path(folder) / EMPTY_OPTIMIZER).is_file():  # saved before the first step: no state, as then
            self.actor.optimizer.state.clear()
        self.actor.scheduler.load_state_dict(state["scheduler"])
        self.actor.take_settings()
        self.actor.nonfinite_in_row = int(state.get("nonfinite_in_row", 0))

    def peak_memory_gb(self) -> float:
        """This rank's peak memory: CUDA allocations on GPU, the process's peak resident set on CPU."""
        if self.spec.device == "cuda":
            peak = torch.cuda.max_memory_allocated() / 2**30
            torch.cuda.reset_peak_memory_stats()  # the next step's peak from here
            return peak
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux

    def configure(self, changes: dict) -> None:
        """Change loss settings between updates (e.g. actor.loss_agg_mode); the model and optimizer stay."""
        self.actor.cfg = self.actor.cfg.model_copy(update=changes)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def shard_model(model, mesh, device: str, dtype: str) -> None:
    """FSDP2 in place: each decoder layer its own unit, then the root.

    GPU: parameters gathered in the profile's dtype (bf16 by default for real models) with fp32
    gradient reduction; CPU: fp32 throughout (bf16 matmuls are slower there, and 1e-5 parity needs it).
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if device == "cuda" and dtype != "float32":
        policy = MixedPrecisionPolicy(param_dtype=getattr(torch, dtype), reduce_dtype=torch.float32)
    else:
        policy = MixedPrecisionPolicy()
    # One rank holds the whole model as its shard: freeing it after each forward would only gather it again.
    reshard = mesh.size() > 1
    layers = set(getattr(model, "_no_split_modules", None) or [])
    for sub in list(model.modules()):
        if type(sub).__name__ in layers:
            fully_shard(sub, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    # A trained model's root (embeddings, final norm, head) stays gathered from its forward to its backward, as FSDP2
    # keeps a root by default: its backward begins at once with the head, which would gather it again (the chunked
    # head uses it between the two). A frozen one (the reference) has no backward to reshard it: it reshards as
    # its layers do.
    trained = any(p.requires_grad for p in model.parameters())
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard and not trained)


def _node_name() -> str:
    """How errors name this rank's node: the host name, with Ray's node IP and id when under Ray."""
    try:
        import ray

        if ray.is_initialized():
            context = ray.get_runtime_context()
            return f"{socket.gethostname()}/{ray.util.get_node_ip_address()}/{context.get_node_id()[:8]}"
    except ImportError:
        pass
    return socket.gethostname()


def _node_ip() -> str:
    """This node's address as other nodes reach it (Ray's view when running under Ray)."""
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except ImportError:
        pass
    return os.environ.get("RLRM_NODE_IP", "127.0.0.1")
