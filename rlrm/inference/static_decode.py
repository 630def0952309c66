"""Compiled decoding: a static KV cache and one fixed-shape decode step, so the step can be a CUDA graph.

    decoder = StaticDecoder(model, "cudagraphs", max_batch_size=64)
    rows = decoder.decode(prompts, params, seeds, stops, pad_id, stop_flag, keep_last)

Why: a transformers decode step is hundreds of small kernels launched one by one from Python; for a model
of a few hundred million parameters the GPU waits on the launches far longer than it computes. Captured
once as a CUDA graph, a step is replayed with one launch. A graph needs fixed shapes and addresses, so:

- the KV cache is a transformers `StaticCache` of R rows x L slots, kept per (R, L) bucket and reused:
  R rounds the batch up to 8, 16, 32, ... (at most `max_batch_size`), L rounds prompt width + new tokens
  up to a multiple of 64. The padding rows repeat row 0's request (its prompt is prefilled once, shared)
  and their results are dropped;
- the attention mask is the whole [R, L] buffer, a slot switched on as it is written;
- rows that finish stay in the batch (a step costs the same with or without them) and feed padding;
  whether any row is left is read back every `CHECK_EVERY` tokens, so the host queues steps ahead.

- attention packs the query heads that share a key/value head onto it (grouped-query attention, as
  transformers does outside torch.compile): inside a compiled step transformers copies every key/value
  head once per query head instead, the whole cache each step (7x over for Qwen2.5-0.5B).

The prompt is prefilled as in the dynamic loop (each distinct prompt once), uncompiled, and copied into
the static cache. Tokens and log-probs equal the dynamic loop's up to float rounding (attention then runs
over the masked, unwritten slots too). Backends (`torch.compile`): "cudagraphs" (dynamo traces the step,
CUDA graphs replay it; no kernel compiler, seconds to warm up), "inductor" (fused kernels too; on CUDA
with CUDA graphs, mode reduce-overhead; its first compile of a shape takes a minute or more), "eager"
(traced and run as is: checks the step compiles whole, on any device). Each new (R, L) bucket compiles
once; torch's recompile limit (8 per function) then runs further shapes uncompiled, with its warning.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from rlrm.inference.base import EngineClosedError, SamplingParams
from rlrm.inference.decode import Decoded, prefill
from rlrm.inference.kv_cache import cache_keyword
from rlrm.inference.sampling import RowSampler

BACKENDS = ("cudagraphs", "inductor", "eager")
ATTENTION = "rlrm_packed_gqa"  # the attention implementation a model decoding here is switched to (from sdpa)
CHECK_EVERY = 4  # tokens between the reads of "is any row left?" (a host sync)
SLOT_MULTIPLE = 64  # cache lengths are rounded up to a multiple of this
KEPT_CACHES = 4  # static caches (and their compiled steps' inputs) kept for reuse, newest first


class StaticDecoder:
    """Decodes batches with a static KV cache and a compiled decode step.

    Args:
        model: a transformers causal LM whose forward takes a `StaticCache` (Llama, Qwen2, Mistral, ...).
        backend: "cudagraphs" (CUDA only), "inductor" or "eager"; see the module docstring.
        max_batch_size: the engine's largest batch (the largest row bucket).

    Raises:
        ValueError: an unknown backend, or "cudagraphs" with the model off CUDA.
    """

    def __init__(self, model, backend: str, max_batch_size: int):
        import torch

        if backend not in BACKENDS:
            raise ValueError(f"unknown compile backend {backend!r}: choose one of {', '.join(BACKENDS)}")
        self.model = model
        self.device = next(model.parameters()).device
        if backend == "cudagraphs" and self.device.type != "cuda":
            raise ValueError(f"compiled decoding with CUDA graphs needs the model on CUDA, not {self.device}")
        self.max_batch_size = max_batch_size
        self._graphs = backend == "cudagraphs" or (backend == "inductor" and self.device.type == "cuda")
        mode = "reduce-overhead" if backend == "inductor" and self.device.type == "cuda" else None
        if getattr(model.config, "_attn_implementation", None) == "sdpa":
            _register_attention()
            model.set_attn_implementation(ATTENTION)
        self._step = torch.compile(self._forward, backend=backend, mode=mode, fullgraph=True, dynamic=False)
        self._caches: OrderedDict[tuple[int, int], Any] = OrderedDict()  # transformers StaticCache
        self._keyword = cache_keyword()

    def _forward(self, ids, mask, positions, cache):
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **{self._keyword: cache}
        )
        return out.logits[:, -1, :].float()

    def rows_for(self, batch: int) -> int:
        """The row bucket a batch of `batch` requests decodes in."""
        rows = 8
        while rows < batch:
            rows *= 2
        return max(batch, min(rows, self.max_batch_size))

    def decode(
        self,
        prompts: list[list[int]],
        params: list[SamplingParams],
        seeds: list[int],
        stops: list[list[int]],
        pad_id: int,
        stop_flag,
        keep_last: bool,
    ) -> list[Decoded]:
        """Same contract as `rlrm.inference.decode.decode`."""
        import torch

        count, device = len(prompts), self.device
        rows = self.rows_for(count)
        prompts = prompts + [prompts[0]] * (rows - count)  # padding rows: row 0 again, prefilled with it
        params = params + [params[0]] * (rows - count)
        seeds = seeds + [seeds[0]] * (rows - count)
        stops = stops + [stops[0]] * (rows - count)
        steps = max(p.max_new_tokens for p in params)
        widest_stop = max(1, max(len(s) for s in stops))
        stop_ids = torch.tensor([s + [-1] * (widest_stop - len(s)) for s in stops], device=device)  # [R, S]
        limit = torch.tensor([p.max_new_tokens for p in params], device=device)
        tokens = torch.full((rows, steps), pad_id, dtype=torch.long, device=device)
        log_probs = torch.zeros((rows, steps), dtype=torch.float32, device=device)
        length = torch.zeros(rows, dtype=torch.long, device=device)
        stopped = torch.zeros(rows, dtype=torch.bool, device=device)
        active = torch.ones(rows, dtype=torch.bool, device=device)
        sampler = RowSampler(params, seeds, steps, device)

        prompt_mask, past, logits = prefill(self.model, prompts, pad_id, device, keep_last)
        width = prompt_mask.shape[1]
        slots = -(-(width + steps) // SLOT_MULTIPLE) * SLOT_MULTIPLE
        cache = self._cache(rows, slots)
        for layer, filled in enumerate(past.layers):  # the prompts' keys/values into slots [0, width)
            cache.update(filled.keys, filled.values, layer)
        del past
        mask = torch.zeros((rows, slots), dtype=prompt_mask.dtype, device=device)
        mask[:, :width] = prompt_mask
        positions = prompt_mask.sum(-1, keepdim=True)  # [R, 1]: a left-padded prompt's next position is its length
        pad = torch.full((rows,), pad_id, dtype=torch.long, device=device)
        for t in range(steps):
            if stop_flag.is_set():
                raise EngineClosedError("rollout engine closed before the request finished")
            token, log_prob = sampler.sample(logits, t)
            tokens[:, t], log_probs[:, t] = token, log_prob  # rows already done write past their length: never read
            length += active.long()
            hit = active & (token[:, None] == stop_ids).any(-1)
            stopped |= hit
            active &= ~hit & (length < limit)
            if t == steps - 1 or (t % CHECK_EVERY == CHECK_EVERY - 1 and not bool(active.any())):
                break
            mask[:, width + t] = 1
            if self._graphs:
                torch.compiler.cudagraph_mark_step_begin()  # the last step's outputs are read: its buffers may go
            logits = self._step(torch.where(active, token, pad)[:, None], mask, positions, cache).clone()
            positions = positions + 1
        lengths, ended = length[:count].tolist(), stopped[:count].tolist()
        tokens_cpu, log_probs_cpu = tokens[:count].cpu(), log_probs[:count].cpu()
        return [
            (tokens_cpu[i, : lengths[i]].tolist(), log_probs_cpu[i, : lengths[i]].tolist(), bool(ended[i]))
            for i in range(count)
        ]

    def _cache(self, rows: int, slots: int):
        """The static cache of this bucket, emptied; made on first use (the oldest of KEPT_CACHES dropped)."""
        from transformers import StaticCache

        key = (rows, slots)
        cache = self._caches.pop(key, None)
        if cache is None:
            cache = StaticCache(config=self.model.config, max_cache_len=slots)
            while len(self._caches) >= KEPT_CACHES:
                self._caches.popitem(last=False)
        else:
            cache.reset()
        self._caches[key] = cache
        return cache


def _register_attention() -> None:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(ATTENTION, _packed_gqa_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)  # the masks sdpa gets


def _packed_gqa_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' sdpa attention, but a one-token query [B, H, 1, D] whose H heads share KV key/value heads in
    groups runs as [B, KV, H / KV, D] against the cache as it is: no copy of the cache per group."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    if query.shape[2] != 1 or groups == 1 or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    batch, heads, _, dim = query.shape
    packed = query.reshape(batch, heads // groups, groups, dim)
    out = torch.nn.functional.scaled_dot_product_attention(
        packed, key, value, attn_mask=attention_mask, scale=kwargs.get("scaling")
    )  # [B, KV, groups, D]; the mask [B, 1, 1, L] holds for every head and group
    return out.reshape(batch, heads, 1, value.shape[-1]).transpose(1, 2).contiguous(), None
