"""When old log-probs are recomputed (rlrm/engine/behaviour.py), by setting and dtype."""

from __future__ import annotations

import pytest
import torch

from rlrm.config.loader import load_profile
from rlrm.engine.behaviour import needs_recompute
from rlrm.errors import ConfigError

F32, BF16 = "float32", "bfloat16"


@pytest.mark.parametrize(
    ("setting", "off_policy", "epochs", "engine", "actor", "expected"),
    [
        ("auto", False, 1, F32, F32, False),  # sync/stream/pipeline, one epoch, same weights and dtype: same numbers
        ("auto", False, 2, F32, F32, True),  # reused over epochs: the ratio must start at exactly 1
        ("auto", False, 1, BF16, F32, True),  # another precision scores differently
        ("auto", False, 1, None, F32, True),  # other code scoring tokens (vLLM, SGLang): assume it differs
        (
            "auto",
            False,
            1,
            F32,
            torch.float32,
            False,
        ),  # an embedded replica names its dtype; the actor has a torch.dtype
        ("auto", False, 1, F32, torch.bfloat16, True),
        ("auto", False, 1, "tf32", torch.float32, True),  # embedded replicas with --tf32 on a GPU: another precision
        ("always", False, 1, F32, F32, True),
        ("never", False, 2, BF16, F32, False),
        ("auto", True, 2, BF16, F32, False),  # off-policy: the engine's log-probs are the behaviour policy's
        ("always", True, 1, F32, F32, False),
    ],
)
def test_needs_recompute(setting, off_policy, epochs, engine, actor, expected):
    got = needs_recompute(setting, off_policy=off_policy, ppo_epochs=epochs, engine_dtype=engine, actor_dtype=actor)
    assert got is expected


def test_needs_recompute_rejects_unknown_settings():
    with pytest.raises(ValueError, match="auto, always or never"):
        needs_recompute("sometimes", off_policy=False, ppo_epochs=1, engine_dtype=F32, actor_dtype=F32)


def test_setting_defaults_to_auto_and_reads_old_booleans():
    assert load_profile("tiny-rule").actor.recompute_old_log_prob == "auto"
    assert load_profile("tiny-rule", ["actor.recompute_old_log_prob=true"]).actor.recompute_old_log_prob == "always"
    assert load_profile("tiny-rule", ["actor.recompute_old_log_prob=false"]).actor.recompute_old_log_prob == "never"
    with pytest.raises(ConfigError, match="recompute_old_log_prob"):
        load_profile("tiny-rule", ["actor.recompute_old_log_prob=sometimes"])
