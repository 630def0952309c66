"""Per-token log-probs (and entropy) of the response tokens under a model."""

from __future__ import annotations

import torch

from rlrm.engine.actor.batch import RolloutBatch
from rlrm.engine.algorithms import entropy_from_logits


def response_log_probs(
    model, batch: RolloutBatch, temperature: float, micro_batch_size: int, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs [B, R] of each response token (and entropy [B, R] if asked), micro-batched.

    Logits are divided by the sampling temperature, as the rollout engine did, so the ratio of
    new to old log-probs compares like with like. Gradients flow unless the caller disables them.
    """
    temperature = temperature if temperature > 0 else 1.0
    outs, ents = [], []
    for start in range(0, len(batch), micro_batch_size):
        mb = batch.select(torch.arange(start, min(start + micro_batch_size, len(batch))))
        lp, ent = _forward(model, mb, temperature, with_entropy)
        outs.append(lp)
        ents.append(ent)
    log_probs = torch.cat(outs)
    return log_probs, (torch.cat(ents) if with_entropy else None)


def _forward(model, mb: RolloutBatch, temperature: float, with_entropy: bool):
    width_r = mb.response_length
    logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, position_ids=mb.position_ids).logits
    logits = logits[:, -width_r - 1 : -1, :].float() / temperature  # [b, R, V]: position t predicts token t+1
    targets = mb.input_ids[:, -width_r:]  # [b, R]
    log_probs = torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None]).squeeze(-1)
    entropy = entropy_from_logits(logits) if with_entropy else None
    return log_probs, entropy
