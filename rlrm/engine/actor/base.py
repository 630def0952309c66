"""The actor contract: what the trainer, the GRPO step and the checkpoints ask of an actor, and nothing else.

    actor: PolicyActor = Actor(...)             # in this process (rlrm/engine/actor/actor.py)
    actor: PolicyActor = start_rank_group(...)  # actor.world_size > 1 (rlrm/engine/actor/group.py)

Two kinds implement it. The in-process `Actor` has no rank processes to close, measure or shard, so its
`close`, `peak_memory_gb` and `write_shards` do nothing and `broken` is None: callers never ask which kind
they hold.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Protocol

from rlrm.config.schema import ActorConfig

if TYPE_CHECKING:  # torch-backed: imported where used, not at import time
    import torch

    from rlrm.engine.actor.actor import MiniBatchHook
    from rlrm.engine.actor.batch import RolloutBatch


class PolicyActor(Protocol):
    """The trained policy as the rest of rlrm sees it."""

    cfg: ActorConfig  # the profile's `actor` section

    @property
    def dtype(self) -> torch.dtype | str:
        """The dtype the policy computes in, or a name for a precision of its own ("bfloat16-autocast"): compared
        with the rollout engine's (rlrm/engine/behaviour.py)."""
        ...

    @property
    def has_ref_model(self) -> bool:
        """Whether there is a frozen reference model (actor.use_kl_loss): the step then sets `ref_log_prob`."""
        ...

    @property
    def broken(self) -> str | None:
        """Why the actor can no longer serve (a rank died), or None: a broken actor's state is not checkpointed."""
        ...

    def compute_old_log_prob(self, batch: RolloutBatch) -> torch.Tensor:
        """Log-probs [B, R] of the responses under the current policy, before the update."""
        ...

    def compute_ref_log_prob(self, batch: RolloutBatch) -> torch.Tensor:
        """Log-probs [B, R] under the reference model (only when `has_ref_model`)."""
        ...

    def update(self, batch: RolloutBatch | Iterable[RolloutBatch], on_mini_batch: MiniBatchHook | None = None) -> dict:
        """PPO epochs over mini-batches (rlrm/engine/actor/actor.py: UpdateLoop.update); actor/* metrics."""
        ...

    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        """The full policy weights, for the rollout engine."""
        ...

    def state_dict(self) -> dict:
        """Optimizer, scheduler and counters for a checkpoint's state.pt."""
        ...

    def load_state_dict(self, state: dict, ckpt_dir: Path | None = None) -> None:
        """Restore what `state_dict` (and `write_shards`) saved."""
        ...

    def write_shards(self, ckpt_dir: Path) -> None:
        """Add the actor's own files to an unfinished checkpoint folder (rank shards; nothing in process)."""
        ...

    def peak_memory_gb(self) -> float | None:
        """The peak memory of processes of its own (the ranks), or None when it runs in the trainer's process."""
        ...

    def close(self) -> None:
        """Stop what the actor started (rank processes)."""
        ...
