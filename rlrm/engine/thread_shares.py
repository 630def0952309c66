"""How the CPU's torch threads are shared when generation and training run at once in one process.

In one-step-off and fully-async with the in-process engine, the decode loop (the engine's worker thread)
and the update (the trainer thread) run at the same time. Each torch thread has its own OpenMP team of
`torch.get_num_threads()` threads, so two teams of N on N cores oversubscribe them: both slow down more
than the overlap gains (on the default benchmark, 2 teams of 2 on 2 cores, the update took 1.16x as
long as with one team of 1). With `trainer.split_threads`, the rollout gets half the threads and the
trainer the other half (the larger half when odd); every other mode, and every run whose generation
or update is in other processes, keeps one team of all of them.

    shares = thread_shares(profile)   # (rollout, trainer) threads, or None
"""

from __future__ import annotations

OVERLAPPING_MODES = ("one-step-off", "fully-async")


def thread_shares(profile) -> tuple[int, int] | None:
    """(rollout threads, trainer threads) when generation and training overlap in this process, else None."""
    trainer = profile.trainer
    if not trainer.split_threads or trainer.mode not in OVERLAPPING_MODES:
        return None
    if trainer.mode == "fully-async" and trainer.max_staleness == 0:  # the rollouter never runs ahead
        return None
    if profile.rollout.backend == "server" or profile.actor.world_size > 1:  # one side is in other processes
        return None
    total = trainer.num_threads or _torch_threads()
    return split(total)


def split(total: int) -> tuple[int, int]:
    """`total` threads as (rollout, trainer): the trainer the larger half, each at least one."""
    rollout = max(1, total // 2)
    return rollout, max(1, total - rollout)


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()
