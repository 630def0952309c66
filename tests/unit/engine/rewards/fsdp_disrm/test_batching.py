"""Legacy micro-batching and the token-level reward tensor (pure functions)."""

from __future__ import annotations

import pytest
import torch

from rlrm.engine.rewards.fsdp_disrm.batching import (
    balanced_partitions,
    count_micro_batches,
    expand_to_token_level,
    num_token_micro_batches,
    restore_order,
)


def test_count_micro_batches_are_consecutive():
    assert count_micro_batches(10, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_token_budget_gives_balanced_parts_and_the_order_comes_back():
    lengths = [50, 10, 40, 30, 20, 60]  # 210 tokens, budget 100 -> ceil(2.1) = 3 parts
    k = num_token_micro_batches(lengths, max_tokens=100)
    assert k == 3
    parts = balanced_partitions(lengths, k)
    # longest first, each to the lightest part: 60 | 50 | 40 -> 40+30 | 50+20 | 60+10 = 70, 70, 70
    assert sorted(sum(lengths[i] for i in p) for p in parts) == [70, 70, 70]
    assert sorted(i for p in parts for i in p) == list(range(6)) and all(p == sorted(p) for p in parts)
    values = [[f"s{i}" for i in p] for p in parts]
    assert restore_order(parts, values) == [f"s{i}" for i in range(6)]
    assert num_token_micro_batches([5, 5], max_tokens=100) == 1
    with pytest.raises(ValueError, match="does not fit"):
        num_token_micro_batches([120], max_tokens=100)
    with pytest.raises(ValueError, match="non-empty"):
        balanced_partitions([1, 2], 3)


def test_score_lands_on_the_last_response_token_in_its_dtype():
    scores = torch.tensor([0.5, -1.25], dtype=torch.bfloat16)
    out = expand_to_token_level(scores, [3, 1], width=4)
    assert out.dtype == torch.bfloat16
    assert out.tolist() == [[0, 0, 0.5, 0], [-1.25, 0, 0, 0]]
    assert out.sum(-1).tolist() == [0.5, -1.25]
