"""Dropout off in the policy's update (`actor.disable_dropout`, TRL's `disable_dropout`).

Old log-probs are taken in eval mode (no dropout) and the update runs in train mode: a policy whose
config has dropout (GPT-2's default 0.1, a Qwen2 with `attention_dropout`) would compare a noisy
forward with a clean one, so an on-policy step's ratio is not 1 (`actor/ppo_kl` 2.5e-3 for a GPT-2
where it is 1e-9 without dropout) and clipping acts on noise. Both kinds are zeroed: `nn.Dropout`
modules and the float probabilities attention modules keep as attributes (`attention_dropout`,
passed to the attention function in train mode). The config is left alone, so a checkpoint's
config.json keeps the model's own values.
"""

from __future__ import annotations

import torch

_DROPOUT_MODULES = (
    torch.nn.Dropout,
    torch.nn.Dropout1d,
    torch.nn.Dropout2d,
    torch.nn.Dropout3d,
    torch.nn.AlphaDropout,
    torch.nn.FeatureAlphaDropout,
)


def disable_dropout(model: torch.nn.Module) -> int:
    """Set every dropout probability in `model` to 0; returns how many were above 0."""
    changed = 0
    for module in model.modules():
        if isinstance(module, _DROPOUT_MODULES):
            changed += module.p > 0
            module.p = 0.0
        for name, value in list(vars(module).items()):
            if "dropout" in name and isinstance(value, float):
                changed += value > 0
                setattr(module, name, 0.0)
    return changed
