"""Grouped-query attention for one-token decode steps, packed instead of copied: what compiled decoding runs.

    use_packed_attention(model)     # the model's attention implementation becomes ATTENTION

A decode step's query [B, H, 1, D] has H heads sharing KV key/value heads in groups of H / KV. Packed, it
runs as [B, KV, H / KV, D] against the cache as it is. transformers packs so in eager decoding (and so in a
step captured as a CUDA graph), but inside a torch.compile'd step it copies every key/value head once per
query head instead: the whole cache, each step, 7x over for Qwen2.5-0.5B. Any other attention call (prefill, a
position bias, no groups) is transformers' sdpa attention unchanged, with sdpa's masks.
"""

from __future__ import annotations

ATTENTION = "rlrm_packed_gqa"  # the name it is registered under with transformers


def use_packed_attention(model) -> None:
    """Switch `model` (running transformers' sdpa attention) to the packed form; its prefill keeps sdpa's."""
    _register()
    model.set_attn_implementation(ATTENTION)


def _register() -> None:
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
