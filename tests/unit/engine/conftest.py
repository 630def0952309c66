"""Engine test fixtures."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture()
def model():
    """A random two-layer Qwen2 causal LM (vocab 64) in eval mode."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    return Qwen2ForCausalLM(config).eval()
