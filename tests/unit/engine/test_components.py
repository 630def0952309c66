"""How a run's parts are built for its precision (rlrm/engine/components.py), and the precisions refused."""

from __future__ import annotations

import re

import pytest
import torch

from rlrm.config.loader import load_profile
from rlrm.engine.components import build_components
from rlrm.errors import ConfigError


@pytest.mark.parametrize(("dtype", "scaled"), [("float16", True), ("bfloat16", False), ("float32", False)])
def test_mixed_precision_keeps_float32_weights_and_scales_only_a_float16_loss(tiny_policy_path, dtype, scaled):
    profile = load_profile(
        "tiny-rule", [f"model.path={tiny_policy_path}", f"model.dtype={dtype}", "trainer.device=cpu"]
    )
    parts = build_components(profile)
    assert next(parts.policy.parameters()).dtype == torch.float32  # mixed precision: float32 master weights
    assert (parts.actor.loss_scale is not None) is scaled


@pytest.mark.parametrize(
    ("sets", "where"),
    [
        (["model.precision=pure"], "model.precision=pure"),
        (["actor.world_size=2"], "actor ranks (FSDP2)"),
        (["actor.strategy=fsdp2"], "actor ranks (FSDP2)"),
    ],
)
def test_float16_is_refused_where_nothing_scales_its_loss(sets, where):
    with pytest.raises(ConfigError, match=rf"model.dtype=float16 with {re.escape(where)}.*use model.dtype=bfloat16"):
        load_profile("tiny-rule", ["model.dtype=float16", *sets])
