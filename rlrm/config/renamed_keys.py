"""Profile keys that were renamed: the old name is still read, as what it meant, with a note printed once.

    migrate(raw, source="profiles/mine.yaml")        # a profile file or a run folder's config.yaml, in place
    pairs = migrate_overrides([("reward.timeout_s", 5)], source="--set")   # -> the new keys, each set to 5

An old key becomes every new key it stood for (`reward.timeout_s` was both the deadline of a reward attempt and
the timeout of each request to a reward server). A mapping (or a `--set` list) that gives both an old key and one
of its new keys is refused with one line: which value was meant cannot be told. Old and new keys may come from
different layers (a profile that `extends:` another, `--set` over a profile): the later layer wins as usual,
because each layer is migrated on its own before they are merged. Run folders written before a rename resume
unchanged: their config.yaml is migrated as it is read.
"""

from __future__ import annotations

import sys
from typing import Any

from rlrm.errors import ConfigError

# old dotted key -> the new keys it stands for (each gets the old value)
RENAMED: dict[str, tuple[str, ...]] = {
    "reward.timeout_s": ("reward.attempt_timeout_s", "reward.server.request_timeout_s"),
}

_noted: set[str] = set()  # old keys whose note this process has printed


def migrate(raw: dict[str, Any], source: str) -> None:
    """Replace every old key of the profile mapping `raw` (in place) by the new keys it stands for."""
    for old, new in RENAMED.items():
        parent, leaf = _parent(raw, old)
        if parent is None or leaf not in parent:
            continue
        both = [key for key in new if _has(raw, key)]
        if both:
            raise ConfigError(_both_message(source, old, both))
        value = parent.pop(leaf)
        for key in new:
            _set(raw, key, value)
        _note(old, new)


def migrate_overrides(pairs: list[tuple[str, Any]], source: str = "--set") -> list[tuple[str, Any]]:
    """`(key, value)` overrides with every old key replaced, in place in the list's order, by its new keys."""
    given = {key for key, _ in pairs}
    out: list[tuple[str, Any]] = []
    for key, value in pairs:
        new = RENAMED.get(key)
        if new is None:
            out.append((key, value))
            continue
        both = [k for k in new if k in given]
        if both:
            raise ConfigError(_both_message(source, key, both))
        out += [(k, value) for k in new]
        _note(key, new)
    return out


def _both_message(source: str, old: str, new: list[str]) -> str:
    return (
        f"{source}: {old} and {', '.join(new)} are both set; {old} is the old name of "
        f"{' and '.join(RENAMED[old])}: remove {old} and keep the new keys"
    )


def _note(old: str, new: tuple[str, ...]) -> None:
    if old in _noted:
        return
    _noted.add(old)
    print(
        f"note: {old} is now {' and '.join(new)} (each given its value); set those instead", file=sys.stderr, flush=True
    )


def _parent(raw: dict[str, Any], key: str) -> tuple[dict[str, Any] | None, str]:
    """The mapping that holds `key`'s last part (None when a section on the way is missing), and that part."""
    *sections, leaf = key.split(".")
    node: Any = raw
    for part in sections:
        node = node.get(part) if isinstance(node, dict) else None
    return (node if isinstance(node, dict) else None), leaf


def _has(raw: dict[str, Any], key: str) -> bool:
    parent, leaf = _parent(raw, key)
    return parent is not None and leaf in parent


def _set(raw: dict[str, Any], key: str, value: Any) -> None:
    *sections, leaf = key.split(".")
    node = raw
    for part in sections:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[leaf] = value
