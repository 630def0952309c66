"""Load profiles: YAML files with `extends:`, `--set a.b=c` overrides, friendly validation errors.

    profile = load_profile("tiny-rule", overrides=["actor.lr=2e-4", "trainer.total_steps=5"])

A profile name resolves to `profiles/<name>.yaml` of this repository (or `$RLRM_PROFILES_DIR`);
a path to a `.yaml` file works too. Every error is a `ConfigError` with the key path and, for an
unknown key, the nearest valid one.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from rlrm.config.foreign_keys import foreign_hint
from rlrm.config.renamed_keys import migrate, migrate_overrides
from rlrm.config.schema import Profile
from rlrm.errors import ConfigError, clipped

_MAX_EXTENDS_DEPTH = 16

M = TypeVar("M", bound=BaseModel)


def profiles_dir() -> Path:
    """The folder that holds the built-in profiles (override with RLRM_PROFILES_DIR)."""
    env = os.environ.get("RLRM_PROFILES_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "profiles"


def list_profiles() -> dict[str, str]:
    """Profile name -> the one-line description it declares."""
    out = {}
    for path in sorted(profiles_dir().glob("*.yaml")):
        raw = _read_yaml(path)
        out[path.stem] = str(raw.get("description", "")).strip()
    return out


def load_profile(name_or_path: str, overrides: list[str] | tuple[str, ...] = ()) -> Profile:
    """Resolve `extends:`, apply `key=value` overrides, and validate.

    Args:
        name_or_path: a profile name from `profiles/` or a path to a YAML file.
        overrides: `a.b=c` strings; values are parsed as YAML (so `1e-4`, `true`, `[1,2]` work); a double-quoted
            value that is LaTeX YAML's escapes would break (`"... \\boxed{}"`) is taken as written.

    Returns:
        The validated Profile.

    Raises:
        ConfigError: unknown profile, unknown key, bad value or failed validation.
    """
    raw = _resolve(name_or_path, chain=())
    raw.pop("extends", None)
    set_keys = []
    for key, value in migrate_overrides([_parse_override(item) for item in overrides]):
        _check_key_path(key)
        _set_path(raw, key, value)
        set_keys.append(key)
    return parse_profile(raw, source=name_or_path, set_keys=set_keys)


def parse_profile(raw: dict[str, Any], source: str = "profile", set_keys: Sequence[str] = ()) -> Profile:
    """Validate a raw mapping (renamed keys read as their new names, in place), pydantic's report as one line."""
    migrate(raw, source)
    return validate_model(raw, Profile, source, set_keys=set_keys)


def validate_model(
    raw: dict[str, Any], model: type[M], source: str, what: str = "profile", set_keys: Sequence[str] = ()
) -> M:
    """Validate `raw` as `model`: unknown keys name the nearest valid one, pydantic's report becomes one line; a
    bad value that came from `--set` (a key of `set_keys`, or under one) is named as `--set KEY`, not as the file's."""
    try:
        _check_unknown_keys(raw, model, prefix="")
    except ConfigError as exc:
        if what == "profile":  # a run's config.yaml, a profile given as a mapping: named, where it has a name
            raise ConfigError(f"{source}: {exc}" if source != "profile" else str(exc)) from None
        raise ConfigError(f"{source}: {str(exc).replace('unknown key', f'unknown {what} key', 1)}") from None
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])  # empty: a check across keys, whose message names them
        value = err.get("input")
        # a value carrying a secret (credentials in a URL) is never repeated back
        shown = "" if isinstance(value, dict) or err["type"] == "credentials" else f" (got {clipped(repr(value))})"
        where = f"{source}: {loc}" if loc else source
        if loc and any(loc == key or loc.startswith(f"{key}.") for key in set_keys):
            where = f"--set {loc}"
        raise ConfigError(f"{where}: {err['msg'].removeprefix('Value error, ')}{shown}") from None


def dump_profile(profile: Profile) -> str:
    """The resolved profile as YAML, exactly what a run uses."""
    return yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False)


def _resolve(name_or_path: str, chain: tuple[str, ...]) -> dict[str, Any]:
    path = _find(name_or_path)
    if str(path) in chain:
        raise ConfigError(f"profile {path.stem}: `extends` forms a cycle: {' -> '.join(chain + (str(path),))}")
    if len(chain) > _MAX_EXTENDS_DEPTH:
        raise ConfigError(f"profile {path.stem}: `extends` is nested more than {_MAX_EXTENDS_DEPTH} deep")
    raw = _read_yaml(path)
    if not raw:
        raise ConfigError(f"{path}: the profile is empty; give at least `extends: NAME` (see `rlrm profiles list`)")
    _anchor_paths(raw, path.parent)
    migrate(raw, str(path))  # each file on its own: a child's old key still overrides its parent's new one
    parent = raw.pop("extends", None)
    try:
        _check_unknown_keys(raw, Profile, prefix="")  # each file on its own, so the error names the file with it
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if parent is None:
        return raw
    beside = path.parent / Path(str(parent)).expanduser()
    if Path(str(parent)).suffix in (".yaml", ".yml") and not Path(str(parent)).is_absolute() and beside.is_file():
        parent = beside  # `extends: base.yaml` names the file beside this one, from whatever folder rlrm runs
    try:
        _find(str(parent))
    except ConfigError as exc:
        raise ConfigError(f"{path}: extends: {exc}") from None
    base = _resolve(str(parent), chain + (str(path),))
    return _deep_merge(base, raw)


def _anchor_paths(raw: dict[str, Any], folder: Path) -> None:
    """A relative `reward.custom.path` in a profile file is relative to that file's folder (so a profile and the
    function it names travel together, and run from any directory); one given with --set stays relative to the
    working directory."""
    custom = (raw.get("reward") or {}).get("custom") if isinstance(raw.get("reward"), dict) else None
    if isinstance(custom, dict) and isinstance(custom.get("path"), str) and custom["path"]:
        given = Path(custom["path"]).expanduser()
        if not given.is_absolute():
            custom["path"] = str((folder / given).resolve())


def _find(name_or_path: str) -> Path:
    path = Path(name_or_path).expanduser()
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ConfigError(f"profile file {path} does not exist")
        return path
    candidate = profiles_dir() / f"{name_or_path}.yaml"
    if candidate.is_file():
        return candidate
    names = sorted(p.stem for p in profiles_dir().glob("*.yaml"))
    near = difflib.get_close_matches(name_or_path, names, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise ConfigError(f"unknown profile {name_or_path!r}{hint}; available: {', '.join(names) or 'none'}")


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML's own loaders keep the last, silently)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen and key != "<<":
            raise yaml.constructor.ConstructorError(
                None, None, f"{key!r} is given twice in one mapping (the first would be ignored)", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def read_yaml_text(path: Path) -> Any:
    """The YAML in the file at `path` (ConfigError naming the file when it is not UTF-8 text or not valid YAML, or
    gives a key twice in one mapping)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text: save it as UTF-8") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} is not valid YAML: {getattr(exc, 'problem', exc)}") from None


def _read_yaml(path: Path) -> dict[str, Any]:
    raw = read_yaml_text(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a profile must be a mapping of sections, got {type(raw).__name__}")
    return raw


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _parse_override(item: str) -> tuple[str, Any]:
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {item!r} must look like section.key=value (e.g. actor.lr=2e-4)")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text
    if "#" in text and not text.strip().startswith(("'", '"', "[", "{")):
        value = text.strip()  # YAML reads `#...` as a comment: `prompt_suffix=... after #### N` is all text
    if isinstance(value, (dict, list)) and not text.strip().startswith(("{", "[")):
        value = text  # `Q: {question}` or `- a`: text with YAML's block marks, not a mapping or list typed inline
    if (
        isinstance(value, dict)
        and value
        and all(isinstance(k, str) and ":" in k and v is None for k, v in value.items())
    ):
        # Hydra's `{a:1,b:2}`: YAML wants a space after the colon and reads keys "a:1", "b:2" with no values
        value = {k.split(":", 1)[0].strip(): _scalar(_yaml_scalar(k.split(":", 1)[1].strip())) for k in value}
    quoted = text.strip()
    if len(quoted) >= 2 and quoted[0] == quoted[-1] == '"':
        return key, _double_quoted(quoted)
    if quoted.startswith(("'", '"')):
        return key, value  # quoted: text, as written (`trainer.run_name='0612'`)
    return key, _scalar(value)


# what YAML's double-quoted escapes make of LaTeX besides control characters: \N of \Nu, \_ , \L of \Lambda, \P of \Pi
_LATEX_MADE = {"\x85", "\xa0", "\u2028", "\u2029"}


def _double_quoted(quoted: str) -> str:
    r"""A double-quoted `--set` value: YAML's escapes read (`\n` a newline, `\u00e9` an e acute), unless the value is
    LaTeX they would break (`\boxed{}` read as a backspace and `oxed{}`, `\frac` as a form feed, `\sqrt` refused):
    then as written, as Hydra keeps it, `\"` and `\\` the only escapes."""
    literal = re.sub(r'\\(["\\])', r"\1", quoted[1:-1])
    try:
        read = yaml.safe_load(quoted)
    except yaml.YAMLError:  # an escape YAML does not know (\s of \sqrt)
        return literal
    if not isinstance(read, str) or any((ord(c) < 32 and c not in "\n\t") or c in _LATEX_MADE for c in read):
        return literal
    return read


def _yaml_scalar(text: str) -> Any:
    """A Hydra-style mapping's value as YAML reads a scalar (`true`, `1.0`, `abc`); text that is not one stays text."""
    try:
        parsed = yaml.safe_load(text) if text else text
    except yaml.YAMLError:
        return text
    return parsed if parsed is None or isinstance(parsed, (str, int, float, bool)) else text


def _scalar(value: Any) -> Any:
    """`value`, with a string that spells a number read as that number: YAML reads `1e-4` as a string (no dot), and
    a number is what anyone typing it means."""
    if isinstance(value, str) and value.isascii():  # int() also reads other scripts' digits: "١٢٣" is text here
        try:
            return float(value) if any(c in value.lower() for c in ".e") else int(value)
        except ValueError:
            return value
    return value


def _check_key_path(key: str) -> None:
    model: type[BaseModel] | None = Profile
    walked: list[str] = []
    for part in key.split("."):
        if model is None:
            raise ConfigError(f"override key {key!r}: {'.'.join(walked)} has no sub-keys")
        fields = model.model_fields
        if part not in fields:
            raise ConfigError(_unknown_key_message(".".join(walked + [part]), part, list(fields), full=key))
        walked.append(part)
        model = _submodel(fields[part].annotation)


def _is_key(key: str) -> bool:
    """Whether `key` (dotted) names one of the profile's settings."""
    try:
        _check_key_path(key)
    except ConfigError:
        return False
    return True


def _set_path(raw: dict[str, Any], key: str, value: Any) -> None:
    node = raw
    parts = key.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def _check_unknown_keys(raw: Any, model: type[BaseModel], prefix: str) -> None:
    if not isinstance(raw, dict):
        return
    fields = model.model_fields
    for key, value in raw.items():
        path = f"{prefix}{key}"
        if key not in fields:
            raise ConfigError(_unknown_key_message(path, str(key), list(fields)))
        sub = _submodel(fields[key].annotation)
        if sub is not None:
            _check_unknown_keys(value, sub, prefix=f"{path}.")


def _unknown_key_message(path: str, key: str, valid: list[str], full: str | None = None) -> str:
    foreign = foreign_hint(full or path, known=_is_key)  # another tool's name: its meaning, not a near spelling
    if foreign is not None:
        return f"unknown key {path!r}: {foreign}"
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    parent = path.rpartition(".")[0]
    hint = f"; did you mean {(parent + '.' if parent else '') + near[0]!r}?" if near else ""
    return f"unknown key {path!r}{hint} (valid here: {', '.join(valid)})"


def _submodel(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None
