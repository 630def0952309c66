"""The legacy scorer's settings: plain data (no torch), so that they can be built anywhere."""

from __future__ import annotations

from dataclasses import dataclass

from rlrm.errors import ConfigError


@dataclass(frozen=True)
class LegacyConfig:
    """How the legacy worker group (`workers.py`) is built and how its ranks (`rank.py`) batch.

    Attributes:
        model_path: local folder of the reward model (a sequence classifier with num_labels=1).
        dtype: parameter/compute dtype of the MixedPrecisionPolicy: bf16, fp16 or fp32.
        world_size: ranks (processes) sharding the model.
        micro_batch_size: samples per forward (when `max_tokens_per_batch` is None).
        max_tokens_per_batch: token budget per forward (dynamic batch size), or None.
        rmpad: padding-free forward.
        device: cpu (gloo) or cuda (nccl, one GPU per rank).
        pad_token_id: id written into padding (masked out; any id works).
        threads: torch CPU threads per rank (0: the cores divided among the ranks).
        start_timeout_s: model load + rendezvous deadline, and the deadline of one scoring call.
        score_offset: debugging only: read the score this many tokens *before* the last valid one
            (1 reproduces an off-by-one pooling bug; the parity verdict must catch it).
    """

    model_path: str
    dtype: str = "bf16"
    world_size: int = 1
    micro_batch_size: int = 8
    max_tokens_per_batch: int | None = None
    rmpad: bool = False
    device: str = "cpu"
    pad_token_id: int = 0
    threads: int = 0
    start_timeout_s: float = 600.0
    score_offset: int = 0


def resolve_device(name: str, refusal: str) -> str:
    """A legacy ranks' device setting resolved: auto is cuda when one is visible, else cpu; cuda where none is
    visible is a ConfigError saying `refusal` (the setting's own words: --device, reward.disrm.legacy_device)."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(refusal)
    return name
