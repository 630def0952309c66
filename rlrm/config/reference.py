"""The profile key reference, rendered from the pydantic schema (each description lives only there).

`python -m rlrm.config.reference` prints the reference as Markdown; `--write docs/configuration.md`
replaces the part of that page between the two markers below, so the page is regenerated, never
edited by hand (tests/docs/test_docs.py fails when it is stale).
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Callable

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from rlrm.config.loader import list_profiles, load_profile
from rlrm.config.schema import Profile
from rlrm.errors import RlrmError

BEGIN = "<!-- BEGIN GENERATED: python -m rlrm.config.reference --write docs/configuration.md -->"
END = "<!-- END GENERATED -->"
PROFILES_BEGIN = "<!-- BEGIN GENERATED PROFILES: python -m rlrm.config.reference --write docs/configuration.md -->"
PROFILES_END = "<!-- END GENERATED PROFILES -->"
_BOUNDS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "min_length": "min length", "max_length": "max length"}


def _type_name(annotation: object) -> str:
    """`Literal['a', 'b']` as `a | b`, `list[int]` as `list[int]`, `str | None` as `str | none`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("none" if a is type(None) else _type_name(a) for a in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in args)}]"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = typing.cast("typing.Callable[[], object]", field.default_factory)()  # no factory here takes data
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None:
        return "none"
    if isinstance(value, str):
        return f"`{value!r}`" if value == "" or value != value.strip() or "\n" in value else f"`{value}`"
    return f"`{value}`"


def _bounds(field: FieldInfo) -> str:
    parts = []
    for item in field.metadata:
        for attr, sign in _BOUNDS.items():
            if getattr(item, attr, None) is not None:
                parts.append(f"{sign} {getattr(item, attr)}")
    return f" ({', '.join(parts)})" if parts else ""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _sections(
    model: type[BaseModel], prefix: str
) -> typing.Iterator[tuple[str, type[BaseModel], list[tuple[str, FieldInfo]]]]:
    """(dotted section, model class, its leaf fields) for `model` and every nested model, depth first."""
    leaves, nested = [], []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            nested.append((f"{prefix}{name}", annotation))
        else:
            leaves.append((name, field))
    yield prefix.rstrip("."), model, leaves
    for path, sub in nested:
        yield from _sections(sub, f"{path}.")


def render() -> str:
    """The reference as Markdown: one table per section, with key, type, default and description."""
    lines = []
    for path, model, leaves in _sections(Profile, ""):
        if not leaves:
            continue
        title = path or "top level"
        doc = " ".join((model.__doc__ or "").split())
        lines += [f"### {title}", ""] + ([doc, ""] if doc and path else [])
        lines += ["| key | type | default | description |", "|---|---|---|---|"]
        for name, field in leaves:
            key = f"{path}.{name}" if path else name
            type_name = _cell(_type_name(field.annotation)) + _bounds(field)
            lines.append(f"| `{key}` | {type_name} | {_cell(_default(field))} | {_cell(field.description or '')} |")
        lines.append("")
    return "\n".join(lines)


def render_profiles() -> str:
    """The shipped profiles as a Markdown table: what each trains, with which reward, where, from its own YAML."""
    lines = [
        "| profile | reward | policy | rollout | data | device | steps | what it is for |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, description in list_profiles().items():
        profile = load_profile(name)
        reward: str = profile.reward.kind
        if profile.reward.server.model:
            reward += f" (`{profile.reward.server.model}`)"
        rollout: str = profile.rollout.backend
        if rollout == "server":
            rollout += f" ({profile.rollout.server.backend} x{profile.rollout.server.replicas})"
        cells = [
            f"`{name}`",
            reward,
            f"`{profile.model.path}`",
            rollout,
            profile.data.source,
            profile.trainer.device,
            str(profile.trainer.total_steps),
            _cell(description),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def splice(page: str, reference: str, begin: str = BEGIN, end: str = END) -> str:
    """`page` with the text between `begin` and `end` replaced by `reference`."""
    if page.count(begin) != 1 or page.count(end) != 1 or page.index(begin) > page.index(end):
        raise RlrmError(f"the page needs the markers {begin!r} and {end!r} once each, in that order")
    head, rest = page.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n\n{reference}\n{end}{tail}"


def write(page: Path) -> None:
    """Regenerate the reference (and the profile table, where the page has its markers) inside `page`."""
    if not page.is_file():
        raise RlrmError(f"{page} is not a file: give the page that holds the reference (docs/configuration.md)")
    text = splice(page.read_text(encoding="utf-8"), render())
    if PROFILES_BEGIN in text:
        text = splice(text, render_profiles(), PROFILES_BEGIN, PROFILES_END)
    page.write_text(text, encoding="utf-8")


def page_main(argv: list[str], render_page: Callable[[], str], write_page: Callable[[Path], None], usage: str) -> int:
    """The command line of a generated reference: no argument prints it, `--write PAGE` regenerates PAGE."""
    if len(argv) == 2 and argv[0] == "--write":
        try:
            write_page(Path(argv[1]))
        except RlrmError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    if argv:
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    sys.stdout.write(render_page())
    return 0


def main(argv: list[str]) -> int:
    return page_main(argv, render, write, "python -m rlrm.config.reference [--write docs/configuration.md]")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
