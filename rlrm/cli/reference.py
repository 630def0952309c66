"""Every command and option of `rlrm`, rendered from the Typer app (each help text lives only there).

`python -m rlrm.cli.reference` prints it as Markdown; `--write docs/commands.md` replaces the part of that page
between its two markers, so the page is regenerated, never edited by hand (tests/docs/test_docs.py fails when an
option is added without regenerating it).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer.main
from typer.core import TyperGroup

from rlrm.cli.main import app
from rlrm.config.reference import page_main, splice
from rlrm.errors import RlrmError

BEGIN = "<!-- BEGIN GENERATED: python -m rlrm.cli.reference --write docs/commands.md -->"
END = "<!-- END GENERATED -->"


def commands() -> list[tuple[str, Any]]:
    """(`rlrm group command`, the Click command) for every command that runs, in the order `--help` lists them."""
    # Any: the Click commands of the Click that Typer bundles (typer._click), whose types are private
    found: list[tuple[str, Any]] = []

    def walk(path: str, command: Any) -> None:
        if not isinstance(command, TyperGroup):
            found.append((path, command))
            return
        # TyperGroup.list_commands never reads its context, which Click types as required
        for name in command.list_commands(None):  # type: ignore[arg-type]
            walk(f"{path} {name}", command.commands[name])

    walk("rlrm", typer.main.get_command(app))
    return found


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _value(param, ctx) -> str:
    """What the option takes: nothing for a flag, else its type, choices and bounds (`int >= 1`)."""
    if param.param_type_name == "option" and param.is_flag:
        return "flag"
    kind = param.display_type(ctx).strip("<>").replace(" range", "")
    if kind.startswith("list[") and kind.endswith("]"):
        kind = f"{kind[5:-1]}, repeatable"
    if param.param_type_name == "argument":
        return kind
    bounds = [f">= {param.min}" if param.min is not None else "", f"<= {param.max}" if param.max is not None else ""]
    return " ".join([kind, *(b for b in bounds if b)])


def _default(param) -> str:
    if param.required:
        return "required"
    flag = param.param_type_name == "option" and param.is_flag
    if param.default is None or param.default == [] or param.default == () or (flag and not param.default):
        return ""
    return f"`{param.default}`"


def _help(command) -> str:
    """The command's docstring, whitespace joined, Typer's `\\b` paragraph marks dropped."""
    return " ".join((command.help or "").replace("\b", "").split())


def render() -> str:
    """Markdown: per command, its help, its usage and a table of its arguments and options."""
    lines: list[str] = []
    for path, command in commands():
        ctx = command.make_context(path, [], resilient_parsing=True)
        usage = " ".join(command.collect_usage_pieces(ctx))
        lines += [f"### {path}", "", _help(command), "", f"`{path} {usage}`", ""]
        params = [p for p in command.params if not p.hidden and p.name != "help"]
        if params:
            lines += ["| argument or option | value | default | description |", "|---|---|---|---|"]
        for param in params:
            if param.param_type_name == "argument":
                name = param.name.upper() + ("..." if param.nargs == -1 else "")
            else:
                name = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
            name = name if name.startswith("`") else f"`{name}`"
            lines.append(f"| {name} | {_value(param, ctx)} | {_default(param)} | {_cell(param.help or '')} |")
        lines.append("")
    return "\n".join(lines)


def write(page: Path) -> None:
    """Regenerate the reference inside `page` (the rest of the page is kept as it is)."""
    if not page.is_file():
        raise RlrmError(f"{page} is not a file: give the page that holds the reference (docs/commands.md)")
    page.write_text(splice(page.read_text(encoding="utf-8"), render(), BEGIN, END), encoding="utf-8")


def main(argv: list[str]) -> int:
    return page_main(argv, render, write, "python -m rlrm.cli.reference [--write docs/commands.md]")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
