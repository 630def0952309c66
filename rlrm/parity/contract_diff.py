"""What differs between two reward setups: the settings (dotted `reward.*` keys) and the reward contract parts
(rlrm/engine/rewards/contract.py: what decides a score).

    keys = setting_changes(a_reward, b_reward)       # ["reward.genrm.template"]
    diff = contract_diff(a_contract, b_contract)     # {"same": False, "parts": ["template"], "changes": [...]}

A changed setting need not change the contract (reward.num_workers never changes a score), and the contract can
differ with no setting changed (the model folder's weights were rebuilt): both are reported.
"""

from __future__ import annotations

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.contract import RewardContract, changed_parts, describe_change


def setting_changes(a: RewardConfig, b: RewardConfig) -> list[str]:
    """The dotted keys (`reward.genrm.template`) whose values differ between two reward sections."""
    flat_a, flat_b = _flatten(a.model_dump(mode="json"), "reward"), _flatten(b.model_dump(mode="json"), "reward")
    return sorted(k for k in set(flat_a) | set(flat_b) if flat_a.get(k) != flat_b.get(k))


def contract_diff(a: RewardContract, b: RewardContract) -> dict:
    """Both fingerprints, whether they are the same, and each differing part with its two values (shortened)."""
    parts = changed_parts(a.parts, b.parts)
    return {
        "same": a.fingerprint == b.fingerprint,
        "a": a.fingerprint,
        "b": b.fingerprint,
        "parts": parts,
        "changes": [change for name in parts for change in _changes(name, a.parts.get(name), b.parts.get(name))],
    }


def _changes(name: str, old, new) -> list[str]:
    """One line per differing leaf of a part (`model.weights ('sha256:1f...' -> 'sha256:9c...')`), so a long part
    (a model's identity, a parser's settings) shows where it differs rather than a shared first few characters."""
    if isinstance(old, str) and isinstance(new, str):
        return [_text_change(name, old, new)]
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [describe_change(name, old, new)]
    flat_old, flat_new = _flatten(old, name), _flatten(new, name)
    keys = sorted(k for k in set(flat_old) | set(flat_new) if flat_old.get(k) != flat_new.get(k))
    return [describe_change(k, flat_old.get(k), flat_new.get(k)) for k in keys]


def _text_change(name: str, old: str, new: str, before: int = 12, chars: int = 40) -> str:
    """Two long texts (judge templates) shown from just before where they first differ: two templates that share
    their first sentence would otherwise read the same."""
    start = next((i for i, (x, y) in enumerate(zip(old, new)) if x != y), min(len(old), len(new)))
    if start <= before:
        return describe_change(name, old, new)
    cut = start - before

    def excerpt(text: str) -> str:
        tail = text[cut : cut + chars]
        return repr("..." + tail + ("..." if cut + chars < len(text) else ""))

    return f"{name} (from character {cut}: {excerpt(old)} -> {excerpt(new)})"


def _flatten(value, prefix: str) -> dict:
    if isinstance(value, dict) and value:
        out: dict = {}
        for key, sub in value.items():
            out.update(_flatten(sub, f"{prefix}.{key}"))
        return out
    return {prefix: value}
