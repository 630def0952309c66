"""KV caches whose batch rows can be picked: a prompt shared by several rows is computed once.

    index, inverse = distinct_rows(prompt_ids, prompt_mask)      # G distinct prompts, row -> prompt
    out = model(input_ids=prompt_ids[index], ..., use_cache=True)  # G rows, not B
    if rows_selectable(cache_of(out)):
        cache_of(out).batch_select_indices(inverse)                # B rows again, each with its prompt's keys/values
    out = model(input_ids=next_ids, **pass_cache(cache_of(out)), use_cache=True)

GRPO samples n responses per prompt, so a step's B = n x G rows hold only G distinct prompts. The
rollout engine prefills each distinct prompt once and the actor runs each distinct prompt once per
forward pass (gradients of the copies add up in the shared keys/values, as autograd sums them
through the index). The numbers equal the per-row computation up to float rounding (the matrix
products see G rows instead of B).
"""

from __future__ import annotations

from functools import lru_cache


def cache_of(out):
    """The KV cache a model's output holds: `cache` from transformers 5.24 on, `past_key_values` before (5.24
    still answers the old name, with a deprecation warning on the user's terminal)."""
    return out["cache"] if "cache" in out else out.get("past_key_values")


def pass_cache(cache) -> dict:
    """The keyword argument that hands `cache` to a model's forward, under this transformers' name for it."""
    return {cache_keyword(): cache}


@lru_cache(maxsize=1)
def cache_keyword() -> str:
    """`cache` from transformers 5.24 on, `past_key_values` before."""
    from importlib.metadata import version

    major, minor = (int(part) for part in version("transformers").split(".")[:2])
    return "cache" if (major, minor) >= (5, 24) else "past_key_values"


def distinct_rows(ids, mask):
    """One row index per distinct (ids, mask) row of [B, P] tensors, and each row's distinct index.

    Returns:
        (index [G] long: the first row of each distinct prompt, prompts in sorted order;
        inverse [B] long: the distinct prompt of each row).
    """
    import torch

    key = torch.cat([ids, mask.to(ids.dtype)], dim=1)  # pads are told apart from a real token of the same id
    _, inverse = torch.unique(key, dim=0, return_inverse=True)
    rows = torch.arange(len(ids), device=ids.device)
    index = torch.full((int(inverse.max()) + 1,), len(ids), device=ids.device)
    index.scatter_reduce_(0, inverse, rows, reduce="amin")
    return index, inverse


def rows_selectable(past) -> bool:
    """Only plain dynamic KV caches are known to select batch rows safely (linear-attention state may not)."""
    from transformers import cache_utils

    names = ("DynamicLayer", "DynamicSlidingWindowLayer")
    plain = tuple(getattr(cache_utils, name) for name in names if hasattr(cache_utils, name))
    layers = getattr(past, "layers", None) or ()
    return bool(layers) and hasattr(past, "batch_select_indices") and all(type(layer) in plain for layer in layers)
