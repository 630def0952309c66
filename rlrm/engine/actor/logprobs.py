"""Per-token log-probs (and entropy) of the response tokens of a RolloutBatch under a causal LM.

    with torch.no_grad():
        old, _ = response_log_probs(model, batch, temperature=1.0, micro_batch_size=16)
    new, entropy = response_log_probs(model, micro, 1.0, len(micro), with_entropy=True)  # with grad
"""

from __future__ import annotations

import inspect

import torch

from rlrm.engine.actor.batch import RolloutBatch
from rlrm.engine.algorithms import entropy_from_logits


def response_log_probs(
    model,
    batch: RolloutBatch,
    temperature: float,
    micro_batch_size: int,
    with_entropy: bool = False,
    *,
    entropy_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs [B, R] of each response token (and entropy [B, R] if asked), micro-batched.

    Logits are divided by the sampling temperature, as the rollout engine did, so the ratio of
    new to old log-probs compares like with like (temperature <= 0, greedy, counts as 1).
    Gradients flow unless the caller disables them (wrap in `torch.no_grad()` for old/ref).
    Values on padded response positions are whatever the model says there: mask them.

    Args:
        model: a causal LM taking input_ids, attention_mask, position_ids and returning `.logits`.
        batch: the samples.
        temperature: the sampling temperature.
        micro_batch_size: samples per forward pass.
        with_entropy: also return the entropy of each position's (tempered) distribution.
        entropy_grad: keep the entropy in the autograd graph; False computes it detached (a
            metric only), which saves a [b, R, V] activation per micro-batch.

    Returns:
        (log_probs [B, R], entropy [B, R] or None), float32.
    """
    temperature = temperature if temperature > 0 else 1.0
    keep_kw = _logits_to_keep_kwarg(model)
    outs, ents = [], []
    for start in range(0, len(batch), micro_batch_size):
        mb = batch.select(torch.arange(start, min(start + micro_batch_size, len(batch))))
        lp, ent = _forward(model, mb, temperature, with_entropy, entropy_grad, keep_kw)
        outs.append(lp)
        ents.append(ent)
    return torch.cat(outs), (torch.cat(ents) if with_entropy else None)


def _forward(model, mb: RolloutBatch, temperature: float, with_entropy: bool, entropy_grad: bool, keep_kw):
    width_r = mb.response_length
    # Drop prompt columns that are padding in every row of this micro-batch: same numbers
    # (position ids are stored, pads are never attended to), less compute.
    first = int(mb.attention_mask.any(0).nonzero()[0]) if mb.attention_mask.any() else 0
    first = min(first, mb.prompt_length - 1)
    input_ids = mb.input_ids[:, first:]
    extra = {keep_kw: width_r + 1} if keep_kw else {}  # only the positions that predict responses
    logits = model(
        input_ids=input_ids,
        attention_mask=mb.attention_mask[:, first:],
        position_ids=mb.position_ids[:, first:],
        use_cache=False,
        **extra,
    ).logits
    logits = logits[:, -width_r - 1 : -1, :].float() / temperature  # [b, R, V]: position t predicts t + 1
    targets = input_ids[:, -width_r:]  # [b, R]
    # log_softmax(x)[y] = x[y] - logsumexp(x), without a second [b, R, V] tensor
    log_probs = logits.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    entropy = None
    if with_entropy:
        if entropy_grad:
            entropy = entropy_from_logits(logits)
        else:
            with torch.no_grad():
                entropy = entropy_from_logits(logits.detach())
    return log_probs, entropy


def _logits_to_keep_kwarg(model) -> str | None:
    """The keyword (transformers >= 4.50: logits_to_keep) that limits the LM head to the last k positions."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return None
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in params:
            return name
    return None
