"""FSDP2 ranks run the LM head in chunks (`actor.logits_chunk_tokens`) with the whole head's numbers.

The chunked head (rlrm/engine/actor/logprobs.py) takes the hidden states from the model's own forward, its head
passing them through, so the root module's forward gathers the root's shards (embeddings, norm, head) and arms
their gradient reduction; the chunks then use the gathered head, kept until the root's backward pass reduces its
gradient. Two gloo ranks, each in its own process (tests/fixtures/fsdp_head_chunks.py): the model sharded as rlrm's
ranks shard it or with its root resharded too, head untied and tied (Qwen2.5-0.5B ties its head to the
embeddings); and under bf16 mixed precision (the ranks' policy on a GPU, run here on gloo), where the chunks add the
gathered bf16 head's gradient up in float32, as the whole head's one product does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
from fsdp_head_chunks import BF16_GRADIENT, SAME_NUMBERS, run_ranks  # noqa: E402


@pytest.mark.parametrize("head, root", [("untied", "rlrm"), ("tied", "rlrm"), ("tied", "resharded")])
def test_fsdp2_ranks_chunk_the_head_with_the_whole_heads_numbers(tmp_path, head, root):
    run_ranks(tmp_path, SAME_NUMBERS, 2, "cpu", head, root)


def test_fsdp2_ranks_in_bf16_mixed_precision_add_the_chunks_head_gradient_up_in_float32(tmp_path):
    run_ranks(tmp_path, BF16_GRADIENT, 2, "cpu")
