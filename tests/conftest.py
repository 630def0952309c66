"""Shared test setup: one torch thread, an offline model cache inside the repo, tiny models built once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Tiny models are deterministic and versioned by recipe, so one cache serves every test session.
os.environ.setdefault("RLRM_MODELS_DIR", str(REPO / ".cache" / "models"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.pop("RLRM_DEBUG", None)


def pytest_configure(config):
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_policy_path() -> Path:
    """The prepared tiny policy (built on first use, then reused)."""
    from rlrm.engine.models.tiny import resolve_model_path

    return Path(resolve_model_path("tiny:policy"))


@pytest.fixture(scope="session")
def random_disrm_path(tmp_path_factory, tiny_policy_path) -> Path:
    """A randomly initialised Qwen2 sequence classifier (num_labels=1) with the tiny tokenizer."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForSequenceClassification

    tok = AutoTokenizer.from_pretrained(tiny_policy_path)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, num_labels=1, pad_token_id=tok.pad_token_id,
    )
    path = tmp_path_factory.mktemp("disrm")
    Qwen2ForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path
