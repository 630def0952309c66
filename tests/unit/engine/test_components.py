"""What building a run's parts says before it trains (rlrm/engine/components.py)."""

from __future__ import annotations

import pytest
import torch

from rlrm.config.loader import load_profile
from rlrm.engine.components import build_components

WARNING = "warning: model.dtype=float16 trains without loss scaling"


@pytest.mark.parametrize(("dtype", "warned"), [("float16", True), ("bfloat16", False), ("float32", False)])
def test_float16_training_warns_that_nothing_scales_its_loss(tiny_policy_path, capsys, dtype, warned):
    profile = load_profile(
        "tiny-rule", [f"model.path={tiny_policy_path}", f"model.dtype={dtype}", "trainer.device=cpu"]
    )
    parts = build_components(profile)
    err = capsys.readouterr().err
    assert (WARNING in err) is warned, err
    assert next(parts.policy.parameters()).dtype == torch.float32  # mixed precision: float32 master weights
