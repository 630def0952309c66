"""How many ranks this machine can run: one GPU each (nccl), or one core each (gloo on CPU).

check_world_size(4, "cuda", key="actor.world_size")   # ConfigError naming the key when it cannot
"""

from __future__ import annotations

import os

from rlrm.errors import ConfigError


def check_world_size(world_size: int, device: str, key: str = "--world-size") -> None:
    """Refuse a world size the machine cannot give every rank a device (GPU) or a core (CPU); `key` names the
    setting in the message (the parity option, or `actor.world_size`)."""
    if world_size < 1:
        raise ConfigError(f"{key} must be >= 1, got {world_size}")
    if device == "cuda":
        import torch

        gpus = torch.cuda.device_count()
        if world_size > gpus:
            raise ConfigError(f"{key} {world_size} needs {world_size} GPUs (one per nccl rank); {gpus} visible")
        return
    cores = os.cpu_count() or 1
    if world_size > cores:
        raise ConfigError(
            f"{key} {world_size} on CPU needs a core per gloo rank; this machine has {cores} "
            f"(more ranks would measure contention, not sharding)"
        )
