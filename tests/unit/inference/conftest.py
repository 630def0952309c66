"""The inference tests' model: a tiny random Qwen2 (vocab 64), its expected values computed from its own forward passes."""

from __future__ import annotations

import pytest
import torch

VOCAB = 64


def tiny_qwen2(seed: int = 0, **config):
    """A random Qwen2 of vocabulary VOCAB, 2 layers, 4 query heads on 2 key/value heads; `config` overrides."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    shape = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2)
    shape.update(num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return Qwen2ForCausalLM(Qwen2Config(**{**shape, **config})).eval()


@pytest.fixture(scope="module")
def model():
    return tiny_qwen2()
