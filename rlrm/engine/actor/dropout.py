"""Dropout off in the policy's update (`actor.disable_dropout`, TRL's `disable_dropout`).

Old log-probs are taken in eval mode (no dropout) and the update runs in train mode: a policy whose
config has dropout (GPT-2's default 0.1, a Qwen2 with `attention_dropout`) would compare a noisy
forward with a clean one, so an on-policy step's ratio is not 1 (`actor/ppo_kl` 2.5e-3 for a GPT-2
where it is 1e-9 without dropout) and clipping acts on noise. Three kinds are zeroed: `nn.Dropout`
modules and the float probabilities modules keep as attributes (`attention_dropout`, DBRX's
`resid_pdrop`: any float whose name holds "drop"), once (`disable_dropout`); and, during each update
only, the same floats of the model's config, which some models read in their forward (Falcon's
`hidden_dropout`), so that a checkpoint's config.json keeps the model's own values (`config_dropout_off`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

_DROPOUT_MODULES = (
    torch.nn.Dropout,
    torch.nn.Dropout1d,
    torch.nn.Dropout2d,
    torch.nn.Dropout3d,
    torch.nn.AlphaDropout,
    torch.nn.FeatureAlphaDropout,
)


def _rates(obj) -> dict[str, float]:
    """The float attributes of `obj` whose name holds "drop" and that are above 0."""
    return {k: v for k, v in vars(obj).items() if "drop" in k and isinstance(v, float) and v > 0}


def disable_dropout(model: torch.nn.Module) -> int:
    """Set every dropout probability kept in `model`'s modules to 0; returns how many were above 0."""
    changed = 0
    for module in model.modules():
        if isinstance(module, _DROPOUT_MODULES):
            changed += module.p > 0
            module.p = 0.0
        for name in _rates(module):
            setattr(module, name, 0.0)
            changed += 1
    return changed


@contextlib.contextmanager
def config_dropout_off(model: torch.nn.Module) -> Iterator[None]:
    """The dropout rates of `model.config` (and of its sub-configs, such as a `text_config`) at 0 inside the block,
    as they were after it."""
    configs = [c for c in (getattr(model, "config", None),) if c is not None]
    configs += [v for c in list(configs) for v in vars(c).values() if hasattr(v, "to_dict") and hasattr(v, "__dict__")]
    saved = [(c, _rates(c)) for c in configs]
    for config, rates in saved:
        for name in rates:
            setattr(config, name, 0.0)
    try:
        yield
    finally:
        for config, rates in saved:
            for name, value in rates.items():
                setattr(config, name, value)
