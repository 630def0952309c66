"""The attacks `rlrm audit reward` sends through a reward: the built-in ones (rlrm/engine/rewards/attack_kinds.py,
shared with the live canaries) and the user's own from a .jsonl file.

    [(a.name, a.make(problem)) for a in BUILTIN]        # ("key-colon", ":"), ..., ("wrong-answer", "12 + 7 = 20\\n#### 20")
    attacks = read_attack_file("my_attacks.jsonl")      # rows: {"name", "response"} or {"name", "template"}

An attack file row holds `name` (optional: `<file stem>:<row>`) and either `response` (the text, sent
as is) or `template` (Python str.format over {question}, {answer} and {solution}; `{{` is a literal brace).
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Callable

from rlrm.engine.rewards.attack_kinds import BUILTIN, REFERENCES, Attack, Problem, literal
from rlrm.errors import DataError
from rlrm.reward_checks.samples import read_jsonl

__all__ = ["BUILTIN", "REFERENCES", "TEMPLATE_FIELDS", "Attack", "Problem", "read_attack_file"]

TEMPLATE_FIELDS = ("question", "answer", "solution")


def read_attack_file(path: Path) -> list[Attack]:
    """The attacks of a .jsonl file; a bad row is a DataError naming the file and the row."""
    attacks, names = [], {a.name for a in BUILTIN + REFERENCES}
    for lineno, row in read_jsonl(path, "--attacks"):
        where = f"{path} row {lineno}"
        name = row.get("name", f"{Path(path).stem}:{lineno}")
        if not isinstance(name, str) or not name.strip():
            raise DataError(f"{where}: name must be a non-empty string")
        if name in names:
            raise DataError(f"{where}: the name {name!r} is taken (a built-in attack or an earlier row)")
        names.add(name)
        has = [key for key in ("response", "template") if key in row]
        if len(has) != 1:
            raise DataError(
                f"{where}: each row needs exactly one of response (the text) or template (over "
                f"{', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)}), found {' and '.join(has) or 'neither'}"
            )
        text = row[has[0]]
        if not isinstance(text, str):
            raise DataError(f"{where}: {has[0]} must be text, got {type(text).__name__}")
        if has[0] == "template":
            _check_template(text, where)
            make = _from_template(text)
        else:
            make = literal(text)
        attacks.append(Attack(name, "file", make))
    return attacks


def _check_template(template: str, where: str) -> None:
    try:
        parsed = [(f, spec or "") for _, f, spec, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise DataError(f"{where}: template is not a str.format template ({exc}; write {{{{ for a brace)") from None
    fields = [f for f, _ in parsed]
    nested = next((f"{{{f}:{spec}}}" for f, spec in parsed if "{" in spec), None)
    if nested:  # {answer:{question}}: the spec is another field's text, which no trial fill can stand for
        raise DataError(f"{where}: template's {nested} takes its format spec from a field; write the spec itself")
    for field in fields:
        if field not in TEMPLATE_FIELDS:
            known = ", ".join("{" + f + "}" for f in TEMPLATE_FIELDS)
            shown = "{" + field + "}"
            raise DataError(f"{where}: template names {shown}, which is not a field; use {known}")
    try:  # a format spec or conversion text cannot take ({answer:d}, {answer!x}) fails here, not mid-audit
        template.format(**dict.fromkeys(TEMPLATE_FIELDS, "1"))
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        raise DataError(f"{where}: template cannot be filled with text ({type(exc).__name__}: {exc})") from None


def _from_template(template: str) -> Callable[[Problem], str]:
    return lambda p: template.format(question=p.question, answer=p.answer, solution=p.solution)
