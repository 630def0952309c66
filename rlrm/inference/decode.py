"""The dynamic decode loop: prefill each distinct prompt once, then KV-cached decoding of a left-padded batch.

    rows = decode(model, prompts, params, seeds, stops, pad_id, stop_flag, keep_last)
    tokens, log_probs, stopped = rows[i]

The KV cache grows by a token a step; rows that finish leave the batch once at most half of it is
still decoding, so a few long responses do not pay for the finished ones. On a GPU the host reads the
device once every `CHECK_EVERY` tokens (are any rows left?), so it queues steps ahead; on the CPU, where
no queue waits, every token. transformers' generate reads twice a token: that, and its mask builder's
check of the padding mask, which the steps here skip in Llama, Mistral and Qwen models (`step_mask`).
`rlrm.inference.static_decode` is the fixed-shape variant for compiled decoding.
"""

from __future__ import annotations

from rlrm.inference.base import EngineClosedError, SamplingParams
from rlrm.inference.kv_cache import cache_of, pass_cache, rows_selectable
from rlrm.inference.packed_attention import ATTENTION
from rlrm.inference.sampling import RowSampler

Decoded = tuple[list[int], list[float], bool]  # a row's tokens, their log-probs, whether a stop token ended it
CHECK_EVERY = 4  # tokens between the reads of "is any row left?" (a host sync)
# models whose forward makes its attention masks from the 2D mask with transformers' mask builder alone, and
# passes a prepared [B, 1, 1, L] mask through (others read the 2D mask themselves: ALiBi in Bloom, Falcon)
PREPARED_MASK_MODELS = ("llama", "mistral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe")
# their attention implementations that take a prepared mask: True attends, or 0 / the dtype's minimum
BOOL_MASKS = ("sdpa", ATTENTION)
ADDITIVE_MASKS = ("eager",)


def decode(
    model,
    prompts: list[list[int]],
    params: list[SamplingParams],
    seeds: list[int],
    stops: list[list[int]],
    pad_id: int,
    stop_flag,
    keep_last: bool,
) -> list[Decoded]:
    """Prefill then KV-cached decoding of one left-padded batch, a row per prompt.

    Args:
        stops: each row's stop token ids (EOS included), kept in its response.
        stop_flag: a threading.Event checked every token: set, the batch is abandoned (EngineClosedError). One
            with a `left()` method (the rows whose caller gave up) has those rows stop at the next check.
        keep_last: the model's forward takes `logits_to_keep` (prefill computes the last position's logits only).

    Returns:
        (token_ids, log_probs, stopped_on_stop_token) per row, in batch order.
    """
    import torch

    device = next(model.parameters()).device
    rows = len(prompts)
    steps = max(p.max_new_tokens for p in params)
    row = row_state(params, stops, pad_id, device)  # rows leave together when the batch is compacted
    sampler = RowSampler(params, seeds, steps, device)
    results: list = [None] * rows

    mask, past, logits = prefill(model, prompts, pad_id, device, keep_last)
    next_pos = mask.sum(-1)  # [B]: a left-padded prompt's next position is its length
    compactable = rows_selectable(past)
    form = mask_form(model, past, padded=len({len(p) for p in prompts}) > 1)
    dtype = next(model.parameters()).dtype
    check_every = 1 if device.type == "cpu" else CHECK_EVERY  # a CPU's read waits on no queue: drop rows at once
    for t in range(steps):
        if stop_flag.is_set():
            raise EngineClosedError("rollout engine closed before the request finished")
        token, log_prob = sampler.sample(logits, t)  # [B], [B]
        active = advance(row, token, log_prob, t)
        if t == steps - 1:
            break
        if t % check_every == check_every - 1:
            drop_left(row, stop_flag)
            live = int(active.sum())  # the host sync, every CHECK_EVERY tokens on a GPU
            if live == 0:
                break
            if live <= active.shape[0] // 2 and compactable:
                keep = active.nonzero().squeeze(-1)
                collect(row, ~active, results)
                row = {k: v[keep] for k, v in row.items()}
                sampler.select(keep)
                past.batch_select_indices(keep)
                mask, next_pos, token = mask[keep], next_pos[keep], token[keep]
                active = row["active"]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        feed = torch.where(active, token, torch.full_like(token, pad_id))
        out = model(
            input_ids=feed[:, None],
            attention_mask=step_mask(mask, form, dtype),
            position_ids=next_pos[:, None],
            **pass_cache(past),
            use_cache=True,
        )
        past, logits = cache_of(out), out.logits[:, -1, :].float()
        next_pos = next_pos + 1
    collect(row, torch.ones_like(row["active"]), results)
    return results


def mask_form(model, past, padded: bool) -> str:
    """How a batch's decode steps pass their attention mask, so that transformers does not read the device to
    build it (its check of whether the padding mask is all ones, `masking_utils._ignore_causal_mask_sdpa`).

    Returns:
        "none" (no row is padded: no mask, as transformers would decide), "bool" or "additive" (the [B, 1, 1, L]
        mask transformers would build, for sdpa or eager attention over a plain KV cache in a model of
        `PREPARED_MASK_MODELS`) or "2d" (transformers builds it, reading the device once: another model or
        attention implementation, or cache layers with a window).
    """
    from transformers.cache_utils import DynamicLayer

    if not padded:
        return "none"
    if getattr(model.config, "model_type", None) not in PREPARED_MASK_MODELS:
        return "2d"
    if not all(type(layer) is DynamicLayer for layer in getattr(past, "layers", None) or [None]):
        return "2d"
    implementation = getattr(model.config, "_attn_implementation", None)
    return "bool" if implementation in BOOL_MASKS else "additive" if implementation in ADDITIVE_MASKS else "2d"


def step_mask(mask, form: str, dtype):
    """A decode step's attention mask in the `mask_form` chosen, from the [B, L] padding mask (1: attend)."""
    import torch

    if form == "none":
        return None
    if form == "2d":
        return mask
    attend = mask[:, None, None, :].bool()  # one query token: it attends to every slot its row has filled
    if form == "bool":
        return attend
    return torch.full(attend.shape, torch.finfo(dtype).min, dtype=dtype, device=mask.device).masked_fill_(attend, 0.0)


def row_state(params: list[SamplingParams], stops: list[list[int]], pad_id: int, device, real: int | None = None):
    """Per-row decoding state, a dict of [B, ...] tensors that rows are picked from together.

    Rows from `real` on (padding rows) hold orig -1 and are never active, so never collected.
    """
    import torch

    rows, steps = len(params), max(p.max_new_tokens for p in params)
    widest_stop = max(1, max(len(s) for s in stops))
    active = torch.arange(rows, device=device) < (rows if real is None else real)
    return {
        "orig": torch.where(active, torch.arange(rows, device=device), -1),
        "limit": torch.tensor([p.max_new_tokens for p in params], device=device),
        "stops": torch.tensor([s + [-1] * (widest_stop - len(s)) for s in stops], device=device),  # [B, S]
        "tokens": torch.full((rows, steps), pad_id, dtype=torch.long, device=device),
        "log_probs": torch.zeros((rows, steps), dtype=torch.float32, device=device),
        "length": torch.zeros(rows, dtype=torch.long, device=device),
        "stopped": torch.zeros(rows, dtype=torch.bool, device=device),
        "active": active,
    }


def drop_left(row: dict, stop_flag) -> None:
    """Stop the rows whose caller gave up (`stop_flag.left()`, original row indices): they leave at the next
    compaction, so a batch-mate's long answer is not paid for by rows nobody waits on."""
    import torch

    left = stop_flag.left() if hasattr(stop_flag, "left") else ()
    if left:
        row["active"] &= ~torch.isin(row["orig"], torch.tensor(left, device=row["orig"].device))


def advance(row: dict, token, log_prob, t: int):
    """Record decode step t's tokens [B] and log-probs [B]; rows that hit a stop token or their limit stop.

    Returns:
        the rows still active [B] (the state's own tensor, updated in place).
    """
    active = row["active"]
    row["tokens"][:, t], row["log_probs"][:, t] = token, log_prob  # rows already done write past their length
    row["length"] += active.long()
    hit = active & (token[:, None] == row["stops"]).any(-1)
    row["stopped"] |= hit
    active &= ~hit & (row["length"] < row["limit"])
    return active


def prefill(model, prompts: list[list[int]], pad_id: int, device, keep_last: bool, share: bool = True):
    """Run the left-padded prompts, each distinct prompt once (see `rlrm.inference.kv_cache`).

    Returns:
        (attention mask [B, P], KV cache of B rows, logits [B, V] float32 of each prompt's last position).
    """
    import torch

    distinct: dict[tuple[int, ...], int] = {}
    inverse = [distinct.setdefault(tuple(p), len(distinct)) if share else i for i, p in enumerate(prompts)]
    unique = list(distinct) if share else prompts
    width = max(len(p) for p in unique)
    input_ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in unique], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in unique], device=device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [G, P]
    extra = {"logits_to_keep": 1} if keep_last else {}
    out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True, **extra)
    past, logits = cache_of(out), out.logits[:, -1, :].float()  # [G, V]
    if len(unique) == len(prompts):
        return mask, past, logits
    if not rows_selectable(past):
        return prefill(model, prompts, pad_id, device, keep_last, share=False)
    index = torch.tensor(inverse, device=device)
    past.batch_select_indices(index)
    return mask[index], past, logits[index]


def collect(row: dict, which, results: list) -> None:
    """Copy the finished rows picked by `which` [B] to Python lists, at their original index."""
    picked = which.nonzero().squeeze(-1)
    orig = row["orig"][picked].tolist()
    tokens, log_probs = row["tokens"][picked].cpu(), row["log_probs"][picked].cpu()
    lengths, stopped = row["length"][picked].tolist(), row["stopped"][picked].tolist()
    for j, i in enumerate(orig):
        n = lengths[j]
        results[i] = (tokens[j, :n].tolist(), log_probs[j, :n].tolist(), bool(stopped[j]))
