"""The fields a judge prompt may name, checked once for `reward.genrm.template` and `reward.rubric.prefix`."""

from __future__ import annotations

import string

JUDGE_TEMPLATE_FIELDS = ("question", "response", "reference", "turns")


def check_template_fields(template: str) -> None:
    """Refuse a judge template without a {response} field, whose placeholders are not JUDGE_TEMPLATE_FIELDS, or that
    str.format cannot read (`{{response}}` is literal text: the judge would never see the answer)."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ValueError(f"genrm.template cannot be filled in ({exc}); write a literal brace as {{{{ or }}}}") from None
    if "response" not in names:
        raise ValueError("genrm.template must contain {response} (the answer the judge scores)")
    unknown = sorted(n for n in names if n not in JUDGE_TEMPLATE_FIELDS)
    if unknown:
        fields = ", ".join("{" + f + "}" for f in JUDGE_TEMPLATE_FIELDS)
        raise ValueError(
            f"genrm.template has the unknown field(s) {', '.join('{' + n + '}' for n in unknown)}; use {fields} "
            "(a literal brace is {{ or }})"
        )
