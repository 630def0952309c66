"""GSM8K answer scoring with verl's semantics (`verl/utils/reward_score/gsm8k.py`).

Only the last 300 characters of a response are searched: long responses are cut to their end,
where the final answer is, so a number early in the reasoning never counts.
"""

from __future__ import annotations

import re

_TAIL_CHARS = 300
_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_FLEXIBLE = re.compile(r"(\-?[0-9\.\,]+)")
METHODS = ("strict", "flexible")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """The final answer in a response, or None.

    `strict` takes the last `#### <number>` (commas and `$` removed); `flexible` takes the last
    number anywhere in the searched tail.
    """
    if method not in METHODS:
        raise ValueError(f"unknown GSM8K method {method!r}; use one of {', '.join(METHODS)}")
    tail = solution_str[-_TAIL_CHARS:]
    if method == "strict":
        matches = _STRICT.findall(tail)
        if not matches:
            return None
        return matches[-1].replace(",", "").replace("$", "")
    for candidate in reversed(_FLEXIBLE.findall(tail)):
        if candidate not in ("", "."):
            return candidate
    return None


def compute_score(
    solution_str: str, ground_truth: str, method: str = "strict", format_score: float = 0.0, score: float = 1.0
) -> float:
    """`score` for the right answer, `format_score` for a wrong one, 0.0 when none was found."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0.0
    return score if answer == ground_truth else format_score
