"""Per-token log-probs (and entropy) of the response tokens of a RolloutBatch under a causal LM.

    with torch.no_grad():
        old, _ = response_log_probs(model, batch, temperature=1.0, micro_batch_size=16)
    new, entropy = response_log_probs(model, micro, 1.0, len(micro), with_entropy=True)  # with grad

Rows of a micro-batch that share a prompt (the n samples of a GRPO group) run it once: one pass
over the distinct prompts fills a KV cache, each row gets its prompt's keys and values, and a
second pass runs the responses only. With 8 samples of 44-token prompts and 20-token responses
that is 2.5x fewer token positions through the model, forward and backward, for the same numbers
up to float rounding (gradients of the copies add up in the shared prompt).

With `chunk_tokens`, the LM head runs on `chunk_tokens` response positions at a time, each chunk's logits
recomputed in the backward pass instead of kept (activation checkpointing of the head alone): a micro-batch
holds one chunk's [n, V] logits instead of all [b, R, V] of them, for a vocabulary of 152k tokens (Qwen2.5) the
largest tensors of the step, at the price of one more LM-head forward per chunk. Only where the logits are the
head's output and nothing more (`CHUNKABLE`: Llama, Qwen2/3, Mistral); elsewhere, whole. The hidden states come
from the model's own forward with its head passing them through, so an FSDP2-sharded model gathers its root's
shards (embeddings, norm, head) and arms their gradient reduction as for the whole head; the root is gathered for
the chunks (under autograd until its backward pass, which reduces the chunks' head gradient with the rest).
"""

from __future__ import annotations

import contextlib
import inspect

import torch
from torch.utils.checkpoint import checkpoint

from rlrm.engine.actor.batch import RolloutBatch
from rlrm.engine.algorithms import entropy_from_logits
from rlrm.inference.kv_cache import cache_of, distinct_rows, pass_cache, rows_selectable

# model types whose logits are exactly lm_head(last hidden state): no soft-capping, scaling or bias terms
CHUNKABLE = ("llama", "mistral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe")
WHOLE_BELOW_BYTES = 256 * 2**20  # a micro-batch's float32 logits under this run whole: chunks would only cost


def response_log_probs(
    model,
    batch: RolloutBatch,
    temperature: float,
    micro_batch_size: int,
    with_entropy: bool = False,
    *,
    entropy_grad: bool = True,
    share_prompts: bool | None = None,
    chunk_tokens: int = 0,
    chunk_above_bytes: int | None = None,
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
        share_prompts: None runs shared prompts once when a micro-batch has any; True always takes
            the two-pass (prompt, then responses) path, so every FSDP rank runs the same number of
            forward passes whatever its rows (their collectives must line up); False never does.
        chunk_tokens: run the LM head on this many response positions at a time, recomputing each chunk's logits
            in the backward pass (0: all at once), in micro-batches whose float32 logits would exceed
            `chunk_above_bytes`. Models outside `CHUNKABLE` run it whole.
        chunk_above_bytes: the size of a micro-batch's float32 logits [b, R, V] from which it is chunked (None:
            `WHOLE_BELOW_BYTES`).

    Returns:
        (log_probs [B, R], entropy [B, R] or None), float32.
    """
    temperature = temperature if temperature > 0 else 1.0
    keep_kw = _logits_to_keep_kwarg(model)
    head = _plain_head(model) if chunk_tokens > 0 else None
    above = WHOLE_BELOW_BYTES if chunk_above_bytes is None else chunk_above_bytes
    outs, ents = [], []
    for start in range(0, len(batch), micro_batch_size):
        mb = batch.select(torch.arange(start, min(start + micro_batch_size, len(batch))))
        targets = mb.input_ids[:, -mb.response_length :]  # [b, R]
        if head is not None and targets.numel() > chunk_tokens and _logit_bytes(head, targets) > above:
            with _passing_through(head):
                hidden = _response_logits(model, mb, keep_kw, share_prompts)  # [b, R, H]
            with _root_gathered(model, head):
                lp, ent = _chunked_head(head, hidden, targets, temperature, with_entropy, entropy_grad, chunk_tokens)
        else:
            logits = _response_logits(model, mb, keep_kw, share_prompts)  # [b, R, V]
            lp, ent = _head_log_probs(logits, targets, temperature, with_entropy, entropy_grad)
        outs.append(lp)
        ents.append(ent)
    return torch.cat(outs), (torch.cat(ents) if with_entropy else None)


def _head_log_probs(logits, targets, temperature: float, with_entropy: bool, entropy_grad: bool):
    """Log-probs (and entropy) of `targets` [...] under logits [..., V] divided by the temperature, float32."""
    logits = logits.float() / temperature
    # log_softmax(x)[y] = x[y] - logsumexp(x), without a second [..., V] tensor
    log_probs = logits.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    entropy = None
    if with_entropy:
        with contextlib.nullcontext() if entropy_grad else torch.no_grad():
            entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
    return log_probs, entropy


def _chunked_head(head, hidden, targets, temperature: float, with_entropy: bool, entropy_grad: bool, chunk: int):
    """`_head_log_probs(head(hidden), ...)` over `chunk` positions at a time; under autograd each chunk's logits
    are recomputed in the backward pass rather than kept (the head's weight gradient adds up over the chunks)."""
    rows, width = targets.shape
    flat_hidden, flat_targets = hidden.reshape(rows * width, -1), targets.reshape(rows * width)
    keep = torch.is_grad_enabled()
    weight = head.weight
    # A bf16 or fp16 weight (pure precision, or FSDP2's gathered head under mixed precision) would add its gradient
    # up over the chunks in its own precision: the chunks cast one float32 copy instead, whose gradient adds up in
    # float32 and is rounded once, as autocast's uncached casts do below for a float32 weight. It costs that copy
    # (Qwen2.5-0.5B's head: 0.54 GB) for the backward pass.
    master = weight.float() if keep and weight.requires_grad and weight.dtype != torch.float32 else None

    def one(h, t):
        with _uncached_autocast(h.device.type):
            logits = head(h) if master is None else torch.nn.functional.linear(h, master.to(weight.dtype))
        return _head_log_probs(logits, t, temperature, with_entropy, entropy_grad)

    outs, ents = [], []
    for h, t in zip(flat_hidden.split(chunk), flat_targets.split(chunk)):  # one SplitBackward, not a slice each
        lp, ent = checkpoint(one, h, t, use_reentrant=False, preserve_rng_state=False) if keep else one(h, t)
        outs.append(lp)
        ents.append(ent)
    entropy = torch.cat(ents).reshape(rows, width) if with_entropy else None
    return torch.cat(outs).reshape(rows, width), entropy


def _uncached_autocast(device_type: str):
    """The autocast in force, but casting the weights anew for each use: autocast's cache would hand every chunk
    the same bf16 copy of the head's weight, whose gradient then adds up over the chunks in bf16."""
    if not torch.is_autocast_enabled(device_type):
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=torch.get_autocast_dtype(device_type), cache_enabled=False)


def _logit_bytes(head, targets) -> int:
    return targets.numel() * head.out_features * 4


def _plain_head(model) -> torch.nn.Linear | None:
    """The LM head of a causal LM whose logits are exactly lm_head(last hidden state); None for other models."""
    if getattr(getattr(model, "config", None), "model_type", None) not in CHUNKABLE:
        return None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if type(head) is not torch.nn.Linear or head.bias is not None:
        return None
    return head


@contextlib.contextmanager
def _root_gathered(model, head: torch.nn.Linear):
    """An FSDP2 model's root shards (the head among them) gathered for the chunks, where its forward resharded them
    (`reshard_after_forward`): the chunks use the head after that forward, and again in the backward pass before the
    root's own backward gathers it. Under autograd it stays gathered until that backward reshards it; without (a
    log-prob pass under no_grad, the reference's) it is resharded after the chunks, as the forward left it. A
    no-op for a root kept gathered (rlrm's ranks keep the policy's) and for a model that is not sharded."""
    gather = _is_shard(head.weight)  # the root's parameters are its shards now
    if gather:
        model.unshard()
    try:
        yield
    finally:
        if gather and not torch.is_grad_enabled():
            model.reshard()


def _is_shard(weight: torch.Tensor) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch without distributed support: nothing is sharded
        return False
    return isinstance(weight, DTensor)


@contextlib.contextmanager
def _passing_through(head: torch.nn.Linear):
    """The model's forward with `head` returning its input: its `.logits` are the last hidden states. The model is
    the actor's own (the rollout engine holds a copy), run by one thread: nothing else calls it meanwhile."""
    # an instance attribute: nn.Module.__call__ finds it before the class's forward (and its hooks still run)
    head.forward = _identity  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        del head.forward


def _identity(hidden: torch.Tensor) -> torch.Tensor:
    # a copy, not the view the forward hands the head ([:, -keep:]): FSDP2 warns on every forward whose output is a
    # view (an in-place op on it would drop its backward hook); [b, R, H] is small beside the logits it replaces
    return hidden.clone()


def _response_logits(model, mb: RolloutBatch, keep_kw, share: bool | None = None):
    """Logits [b, R, V] of the positions that predict the response tokens (position t predicts t + 1).

    Rows that share a prompt (a GRPO group) run it once (see `rlrm.inference.kv_cache`).
    """
    first, index, inverse = _prompt_layout(mb)
    if share or (share is None and len(index) < len(mb)):
        logits = _shared_prompt_logits(model, mb, first, index, inverse, keep_kw)
        if logits is not None:
            return logits
    width_r = mb.response_length
    extra = {keep_kw: width_r + 1} if keep_kw else {}  # only the positions that predict responses
    logits = model(
        input_ids=mb.input_ids[:, first:],
        attention_mask=mb.attention_mask[:, first:],
        position_ids=mb.position_ids[:, first:],
        use_cache=False,
        **extra,
    ).logits
    return logits[:, -width_r - 1 : -1, :]


def _prompt_layout(mb: RolloutBatch) -> tuple[int, torch.Tensor, torch.Tensor]:
    """(first, index, inverse): the first prompt column that is not padding in every row (the columns before it
    are dropped: same numbers, as position ids are stored and pads never attended to, less compute), and
    `distinct_rows` of the prompts from there. Read from the batch's CPU copies when it has them (`collate` makes
    them): reading the GPU's tensors would wait for the work queued on it, four times per forward."""
    width_p = mb.prompt_length
    if mb.prompt_key is not None and mb.prompt_start is not None:
        first = min(int(mb.prompt_start.min()), width_p - 1)
        keys, inverse = torch.unique(mb.prompt_key, return_inverse=True)  # sorted: distinct_rows' order
        rows = torch.arange(len(mb))
        index = torch.full((len(keys),), len(mb), dtype=torch.long).scatter_reduce_(0, inverse, rows, reduce="amin")
        device = mb.input_ids.device
        return first, index.to(device, non_blocking=True), inverse.to(device, non_blocking=True)
    first = int(mb.attention_mask.any(0).nonzero()[0]) if mb.attention_mask.any() else 0
    first = min(first, width_p - 1)
    index, inverse = distinct_rows(mb.input_ids[:, first:width_p], mb.attention_mask[:, first:width_p])
    return first, index, inverse


def _shared_prompt_logits(model, mb: RolloutBatch, first: int, index, inverse, keep_kw):
    """`_response_logits` with each distinct prompt run once; None when the model's cache cannot be shared."""
    width_p, width_r = mb.prompt_length, mb.response_length
    prompt = slice(first, width_p)
    out = model(
        input_ids=mb.input_ids[index, prompt],
        attention_mask=mb.attention_mask[index, prompt],
        position_ids=mb.position_ids[index, prompt],
        use_cache=True,
        **({keep_kw: 1} if keep_kw else {}),
    )
    past = cache_of(out)
    if past is None or not rows_selectable(past):
        return None
    head = out.logits[:, -1:, :][inverse]  # [b, 1, V]: a prompt's last position predicts response token 0
    if width_r == 1:
        return head
    past.batch_select_indices(inverse)
    end = width_p + width_r - 1  # the last response token predicts nothing that is scored
    out = model(
        input_ids=mb.input_ids[:, width_p:end],
        attention_mask=mb.attention_mask[:, first:end],
        position_ids=mb.position_ids[:, width_p:end],
        **pass_cache(past),
        use_cache=True,
        **({keep_kw: width_r - 1} if keep_kw else {}),
    )
    return torch.cat([head, out.logits[:, -(width_r - 1) :, :]], dim=1)


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
