"""The resolved settings of one `rlrm parity disrm` run: plain data, saved into summary.json.

Imports nothing heavy (pydantic only), like the profile schema.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from rlrm.config.reward import LegacyDtype, RewardConfig
from rlrm.parity.compare import DEFAULT_MIN_GROUP_PEARSON, Tolerances

LoopDtype = Literal["fp32", "bf16"]
Truncation = Literal["keep-end", "keep-start"]
Device = Literal["cpu", "cuda"]
ALL_LEGACY_DTYPES: tuple[str, ...] = get_args(LegacyDtype)
ALL_LOOP_DTYPES: tuple[str, ...] = get_args(LoopDtype)
TRUNCATIONS: tuple[str, ...] = get_args(Truncation)
DEVICES: tuple[str, ...] = get_args(Device)


class ParityConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str = Field(description="Reward model folder (a sequence classifier with num_labels=1).")
    legacy_dtypes: list[LegacyDtype] = Field(
        ["bf16"], min_length=1, description="Compute dtypes of the legacy FSDP2 scorer."
    )
    loop_dtypes: list[LoopDtype] = Field(["fp32"], min_length=1, description="Dtypes of the served DisRM.")
    world_size: int = Field(1, ge=1, description="Legacy ranks (processes) sharding the reward model.")
    micro_batch_size: int = Field(8, gt=0, description="Legacy samples per forward (without a token budget).")
    max_tokens_per_batch: int | None = Field(
        None, gt=0, description="Legacy token budget per forward (dynamic batch size)."
    )
    rmpad: bool = Field(False, description="Legacy padding-free forward.")
    max_length: int = Field(512, gt=0, description="Longest conversation scored, in reward-model tokens.")
    truncation: Truncation = Field(
        "keep-end",
        description="Legacy truncation: keep-end (as the reward loop) or keep-start (as verl's legacy worker).",
    )
    template: str | None = Field(None, description="Chat template used instead of the tokenizer's (both paths).")
    device: Device = Field("cpu", description="Where the legacy ranks run.")
    threads: int = Field(0, ge=0, description="torch threads per legacy rank (0: cores / world size).")
    addresses: list[str] = Field(default_factory=list, description="Score the loop side with these running servers.")
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)
    max_outside_frac: float = Field(ge=0, le=1)
    min_spearman: float = Field(ge=-1, le=1)
    max_rank_flips: int = Field(ge=0)
    min_group_pearson: float = Field(
        DEFAULT_MIN_GROUP_PEARSON,
        ge=-1,
        le=1,
        description="Lowest Pearson correlation of the scores after removing each group's mean.",
    )
    adv_eps: float = Field(1e-6, gt=0, description="GRPO std epsilon (the profile's algorithm.adv_eps).")
    norm_adv_by_std: bool = Field(True, description="GRPO divides by the group std (algorithm.norm_adv_by_std).")
    score_offset: int = Field(0, ge=0, description="Debugging: legacy reads the score this many tokens early.")
    invariance: bool = Field(
        True,
        description="Also check the served DisRM's score invariance (batch 1 / 8 / max, right / left padding); fails the verdict.",
    )
    reward: RewardConfig = Field(
        default_factory=RewardConfig, description="The profile's reward section (loop settings)."
    )

    def tolerances(self):
        return Tolerances(
            atol=self.atol,
            rtol=self.rtol,
            max_outside_frac=self.max_outside_frac,
            min_spearman=self.min_spearman,
            max_rank_flips=self.max_rank_flips,
            min_group_pearson=self.min_group_pearson,
        )
