"""The legacy DisRM inside the trainer: verl's FSDP reward-model worker, behind the per-sample contract.

    scorer = LegacyDisRM(cfg, model_path)        # reward.disrm.scorer: legacy
    await scorer.start()                         # loads and shards the model (world size ranks)
    result = await scorer(sample)                # batched with the samples that arrive together
    await scorer.close()

Only for parity runs (`rlrm parity disrm --train-steps`): the same conversation rendering and
truncation as the served DisRM client, scored by the FSDP2 worker group of `workers.py` in
`reward.disrm.legacy_dtype`, so two trainings differ only in the scoring path. Samples are
gathered into batches (as the legacy worker scored a whole batch) by an in-process batcher.
"""

from __future__ import annotations

import asyncio

from rlrm.call_errors import BadRequest
from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardResult, RewardSample
from rlrm.engine.rewards.disrm import load_disrm_tokenizer, render_conversation
from rlrm.engine.rewards.errors import NonFiniteScore
from rlrm.engine.rewards.fsdp_disrm.config import LegacyConfig, resolve_device
from rlrm.engine.rewards.fsdp_disrm.workers import LegacyScorerError, LegacyWorkerGroup
from rlrm.launch.server.batcher import DynamicBatcher


class LegacyDisRM:
    def __init__(self, cfg: RewardConfig, model_path: str):
        self.cfg, self.model_path = cfg, model_path
        self.tokenizer, self.limit = load_disrm_tokenizer(cfg, model_path)
        self.group: LegacyWorkerGroup | None = None
        self.batcher: DynamicBatcher | None = None
        self.__name__ = "legacy_disrm"

    async def start(self) -> None:
        import torch

        d = self.cfg.disrm
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        legacy = LegacyConfig(
            model_path=self.model_path,
            dtype=d.legacy_dtype,
            world_size=d.legacy_world_size,
            micro_batch_size=d.legacy_micro_batch,
            device=legacy_device(d.legacy_device),
            pad_token_id=pad,
            # one rank runs in the trainer's process: it keeps the trainer's torch threads (trainer.num_threads)
            threads=torch.get_num_threads() if d.legacy_world_size == 1 else 0,
        )
        self.group = LegacyWorkerGroup(legacy)
        await asyncio.to_thread(self.group.start)
        self.batcher = DynamicBatcher(self._score_batch, max_batch=1024, max_queue=1 << 20, wait_ms=5.0)

    def _score_batch(self, sequences: list[list[int]]) -> list[float]:
        if self.group is None:  # the batcher is made after the group
            raise LegacyScorerError("the legacy DisRM scores only after start()")
        scores = self.group.score(sequences, [1] * len(sequences)).scores
        return scores.float().cpu().tolist()

    async def __call__(self, sample: RewardSample) -> RewardResult:
        limit = self.limit
        ids = render_conversation(self.tokenizer, sample.prompt, sample.solution_str)
        truncated = len(ids) > limit
        if truncated:
            if self.cfg.disrm.too_long == "error":
                raise BadRequest(f"sample {sample.uid}: {len(ids)} tokens, more than the DisRM takes ({limit})")
            ids = ids[-limit:]  # keep the end, exactly as the served client does
        if self.batcher is None:
            raise LegacyScorerError("the legacy DisRM scores only after start()")
        (score,) = await self.batcher.submit([ids])
        if score != score or score in (float("inf"), float("-inf")):
            raise NonFiniteScore(f"legacy DisRM gave {score} for sample {sample.uid}")
        return RewardResult(score, {"disrm_score": score, "disrm_truncated": truncated})

    async def close(self) -> None:
        if self.batcher is not None:
            await self.batcher.close()
        if self.group is not None:
            await asyncio.to_thread(self.group.close)


def legacy_device(name: str) -> str:
    """`reward.disrm.legacy_device` resolved: auto is cuda when one is visible, else cpu."""
    refusal = "reward.disrm.legacy_device=cuda but no CUDA device is visible; set it to cpu or auto"
    return resolve_device(name, refusal)
