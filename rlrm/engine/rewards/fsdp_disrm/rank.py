"""The legacy DisRM scorer, one rank of it: verl's in-trainer reward-model worker rebuilt on FSDP2.

What verl's legacy `RewardModelWorker` did, and this rank does the same way:
- the reward model is loaded as a *token* scorer (body + `score` head, no pooling: verl loaded it
  with AutoModelForTokenClassification) and sharded with FSDP2 `fully_shard`, each decoder layer
  its own unit, under a MixedPrecisionPolicy: parameters gathered in the compute dtype (bf16 by
  default), gradients reduced in fp32 (unused here: scoring runs under no_grad);
- the batch arrives right-padded; positions come from the attention mask and the score is the
  logit at the *last valid token*, found from the mask (`argmax(position_ids * attention_mask)`),
  never assumed to be the last column;
- micro-batches by count, or by a token budget (dynamic batch size: balanced micro-batches, every
  rank running the same number so FSDP's collectives line up), with the input order restored;
- optionally padding-free (`rmpad`): the micro-batch's valid tokens packed into one row with
  positions restarting per sequence, so attention never crosses sequences;
- each score lands on the last valid response token of a token-level tensor in the compute dtype.

This module imports torch: import it inside functions (the worker group and the parity tool do).
"""

from __future__ import annotations

import torch
from torch import nn

from rlrm.engine.rewards.fsdp_disrm.batching import (
    balanced_partitions,
    count_micro_batches,
    expand_to_token_level,
    num_token_micro_batches,
    restore_order,
)
from rlrm.engine.rewards.fsdp_disrm.config import LegacyConfig
from rlrm.errors import ModelError

LEGACY_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class TokenScorer(nn.Module):
    """Body + score head without pooling: one logit per token, [b, s]."""

    def __init__(self, seq_classifier):
        super().__init__()
        self.body = getattr(seq_classifier, seq_classifier.base_model_prefix)
        self.head = seq_classifier.score

    def forward(self, input_ids, attention_mask, position_ids):
        hidden = self.body(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state  # [b, s, h]
        return self.head(hidden).squeeze(-1)  # [b, s]


def load_token_scorer(model_path: str) -> tuple[TokenScorer, list[str]]:
    """The reward model as a TokenScorer in fp32, and the class names of its decoder layers.

    Raises:
        ModelError: the checkpoint cannot be loaded, has no trained `score` head, or num_labels != 1.
    """
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # a missing head is reported below, as one line
    hf_logging.disable_progress_bar()
    try:
        model, info = AutoModelForSequenceClassification.from_pretrained(
            model_path, dtype=torch.float32, output_loading_info=True
        )
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load the reward model {model_path!r}: {str(exc).strip().splitlines()[0]}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    head = getattr(model, "score", None)
    if not isinstance(head, nn.Linear):
        raise ModelError(
            f"{model_path} has no `score` head: the legacy scorer needs a decoder-only sequence classifier"
        )
    fresh = [k for k in info.get("missing_keys", []) if str(k).startswith("score")]
    if fresh:
        raise ModelError(
            f"{model_path} has no trained classification head ({', '.join(sorted(map(str, fresh)))} would be random): "
            "is it a causal LM rather than a reward model?"
        )
    if head.out_features != 1:
        raise ModelError(
            f"{model_path} has num_labels={head.out_features}; a DisRM must output one score (num_labels=1)"
        )
    layers = list(getattr(model, "_no_split_modules", None) or [])
    return TokenScorer(model).eval(), layers


def shard_fsdp2(module: nn.Module, layer_classes: list[str], mesh, dtype: torch.dtype) -> None:
    """FSDP2 in place: every decoder layer its own unit, then the root (embeddings, norm, head).

    Parameters are re-sharded after each forward (freeing the gathered copy, as verl's reward
    worker did) when there is more than one rank; with one rank the shard *is* the whole model and
    re-sharding would only copy it again before every micro-batch (measured: ~7% of the time of a
    4 M-parameter model's forward on CPU).
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32, cast_forward_inputs=True)
    reshard = mesh.size() > 1
    for sub in list(module.modules()):
        if type(sub).__name__ in layer_classes:
            fully_shard(sub, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    fully_shard(module, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)


class LegacyRank:
    """One rank: the sharded model and the scoring of this rank's share of a batch.

    Needs the default process group to be initialised (see `rlrm.engine.rewards.fsdp_disrm.workers`).
    """

    def __init__(self, cfg: LegacyConfig, rank: int):
        from torch.distributed.device_mesh import init_device_mesh

        self.cfg = cfg
        self.device = torch.device(f"cuda:{rank}") if cfg.device == "cuda" else torch.device("cpu")
        module, layer_classes = load_token_scorer(cfg.model_path)
        self.module = module.to(self.device)
        mesh = init_device_mesh(self.device.type, (cfg.world_size,))
        shard_fsdp2(self.module, layer_classes, mesh, LEGACY_DTYPES[cfg.dtype])

    @torch.no_grad()
    def score(self, ids: list[list[int]], response_tokens: list[int], width: int) -> torch.Tensor:
        """Token-level scores of this rank's samples: [m, width] in the compute dtype."""
        parts = self._micro_batches([len(s) for s in ids])
        per_part = [list(self._forward([ids[i] for i in part]).unbind(0)) for part in parts]
        scores = torch.stack(restore_order(parts, per_part))  # [m]
        return expand_to_token_level(scores, response_tokens, width)

    def _micro_batches(self, lengths: list[int]) -> list[list[int]]:
        budget = self.cfg.max_tokens_per_batch
        if budget is None:
            return count_micro_batches(len(lengths), self.cfg.micro_batch_size)
        import torch.distributed as dist

        k = torch.tensor([num_token_micro_batches(lengths, budget)], device=self.device)
        dist.all_reduce(k, op=dist.ReduceOp.MAX)  # the same number of forwards on every rank
        return balanced_partitions(lengths, int(k.item()))

    def _forward(self, batch: list[list[int]]) -> torch.Tensor:
        """Scores of one micro-batch, [b] in the compute dtype."""
        if self.cfg.rmpad:
            return self._forward_packed(batch)
        width = max(len(s) for s in batch)
        ids = torch.full((len(batch), width), self.cfg.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, seq in enumerate(batch):  # right padding
            ids[row, : len(seq)] = torch.tensor(seq)
            mask[row, : len(seq)] = 1
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)  # [b, s]
        ids, mask, position_ids = ids.to(self.device), mask.to(self.device), position_ids.to(self.device)
        logits = self.module(input_ids=ids, attention_mask=mask, position_ids=position_ids)  # [b, s]
        last = torch.argmax(position_ids * mask, dim=-1)  # [b] the last valid token, from the mask
        last = (last - self.cfg.score_offset).clamp(min=0)
        return logits[torch.arange(len(batch), device=self.device), last]

    def _forward_packed(self, batch: list[list[int]]) -> torch.Tensor:
        """Padding-free: one row of every valid token; positions restart at each sequence, which
        transformers turns into a block-diagonal causal mask (no attention across sequences)."""
        lengths = torch.tensor([len(s) for s in batch])
        ids = torch.tensor([t for s in batch for t in s], device=self.device)[None]  # [1, total]
        position_ids = torch.cat([torch.arange(n) for n in lengths.tolist()]).to(self.device)[None]  # [1, total]
        logits = self.module(input_ids=ids, attention_mask=None, position_ids=position_ids)[0]  # [total]
        starts = lengths.cumsum(0) - lengths
        last = torch.maximum(starts + lengths - 1 - self.cfg.score_offset, starts)
        return logits[last.to(self.device)]
