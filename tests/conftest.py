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
