"""Micro-batching as verl's legacy workers did it, and the token-level reward tensor. Pure functions.

parts = count_micro_batches(n=10, size=4)                    # [[0..3], [4..7], [8, 9]]
k = num_token_micro_batches(lengths, max_tokens=4096)        # dynamic batch size ...
parts = balanced_partitions(lengths, k)                      # ... k micro-batches of similar token sums
scores = restore_order(parts, per_part_scores)               # back to the input order
token_level = expand_to_token_level(scores, response_tokens, width)
"""

from __future__ import annotations

import heapq
import math


def count_micro_batches(n: int, size: int) -> list[list[int]]:
    """Consecutive micro-batches of at most `size` samples."""
    return [list(range(start, min(n, start + size))) for start in range(0, n, size)]


def num_token_micro_batches(lengths: list[int], max_tokens: int) -> int:
    """How many micro-batches a token budget needs: ceil(tokens / budget), at most one per sample.

    As verl's `rearrange_micro_batches`: the partitions are balanced rather than packed, so one may
    exceed the budget by less than a sequence. With several ranks, every rank must then run the
    largest count of any rank (FSDP's collectives need the same number of forwards everywhere).
    """
    if not lengths:
        return 0
    if max(lengths) > max_tokens:
        raise ValueError(
            f"a sequence of {max(lengths)} tokens does not fit a micro-batch budget of {max_tokens} tokens"
        )
    return min(len(lengths), math.ceil(sum(lengths) / max_tokens))


def balanced_partitions(lengths: list[int], k: int) -> list[list[int]]:
    """Split sample indices into `k` non-empty parts with similar token sums (longest first, each to
    the lightest part); indices stay sorted inside a part. Needs 1 <= k <= len(lengths)."""
    if not 1 <= k <= len(lengths):
        raise ValueError(f"cannot split {len(lengths)} samples into {k} non-empty micro-batches")
    heap = [(0, part) for part in range(k)]  # (token sum, part index)
    parts: list[list[int]] = [[] for _ in range(k)]
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        total, part = heapq.heappop(heap)
        parts[part].append(index)
        heapq.heappush(heap, (total + lengths[index], part))
    return [sorted(p) for p in parts]


def restore_order(parts: list[list[int]], values: list[list]) -> list:
    """Values computed per part, put back at their samples' original positions."""
    out = [None] * sum(len(p) for p in parts)
    for part, part_values in zip(parts, values):
        for index, value in zip(part, part_values):
            out[index] = value
    return out


def expand_to_token_level(scores, response_tokens: list[int], width: int):
    """The token-level reward tensor: each score on its response's last valid token.

    Args:
        scores: [B] tensor; its dtype is kept (verl's legacy worker kept the model's compute dtype).
        response_tokens: [B] response lengths (>= 1).
        width: T, the longest response.

    Returns:
        [B, T] zeros except `scores[i]` at `[i, response_tokens[i] - 1]`; `.sum(-1)` gives the scores back.
    """
    import torch

    index = torch.as_tensor(response_tokens, dtype=torch.long) - 1  # [B]
    out = torch.zeros((len(response_tokens), width), dtype=scores.dtype)
    out[torch.arange(len(response_tokens)), index] = scores.cpu()
    return out
