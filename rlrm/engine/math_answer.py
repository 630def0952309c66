"""MATH answer scoring with the semantics of verl's `math_reward.py` (Hendrycks MATH, lm-eval's `hendrycks_math`).

    extract_solution("... so the answer is $\\boxed{\\dfrac12}$.")   # "\\dfrac12"
    is_equiv("\\dfrac12", "\\frac{1}{2}")                            # True: both normalise to \\frac{1}{2}

The answer is the content of the response's last `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed 5` without braces),
braces balanced. Two answers are equal when their normalised texts are: spaces, `\\left`/`\\right`, `\\!`, `\\$`,
degrees, `\\%` and a trailing `\\text{ unit}` removed; `\\tfrac`/`\\dfrac` read as `\\frac`,
`\\frac12` as `\\frac{1}{2}`, `a/b` of two integers as `\\frac{a}{b}`, `0.5` as `\\frac{1}{2}`, `\\sqrt2` as
`\\sqrt{2}` (`\\sqrt23` as `\\sqrt{2}3`, as LaTeX reads it), `.5` as `0.5`, `x = 3` as `3`. Nothing is
evaluated: `\\frac{2}{4}` and `\\frac{1}{2}`, `0.25` and `\\frac14` are different answers here, as they are in
verl's rule, so numbers compare with a verl run's. Three departures: an `\\fbox{...}` answer counts (verl finds it,
then scores it 0), `\\sqrt 2` is `\\sqrt{2}` (as LaTeX reads it), and the last box is the answer whatever its form
(verl takes a `\\boxed 5` anywhere over a later `\\boxed{6}`). Measured with benchmarks/math_rule_vs_verl.py against
verl's own `math_reward.compute_score`: docs/benchmarks.md ("The MATH rule against verl's").
"""

from __future__ import annotations

import re

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_SQRT_BARE = re.compile(r"\\sqrt([^{\\])")  # LaTeX's argument: one character


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` / `\\fbox{...}` (braces balanced) or `\\boxed X` (up to a `$`), or None.

    An unclosed box (a response cut at max_new_tokens inside it) is no answer.
    """
    start = max(text.rfind(command) for command in _BOX_COMMANDS)
    if start < 0:
        return None
    command = next(c for c in _BOX_COMMANDS if text.startswith(c, start))
    rest = text[start + len(command) :]
    if rest.startswith(" "):  # `\boxed 5$`: verl reads up to the next dollar sign
        return rest[1:].split("$")[0].strip() or None
    if not rest.startswith("{"):
        return None
    depth = 0
    for i, char in enumerate(rest):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return rest[1:i]
    return None


def extract_solution(solution_str: str) -> str | None:
    """The final answer in a response: its last box's content, or None when it has none (an empty box is none: a
    format without content, as GSM8K's bare `####` is)."""
    answer = last_boxed(solution_str)
    return answer if answer is not None and answer.strip() else None


def is_equiv(answer: str | None, truth: str | None) -> bool:
    """Whether two answers are the same after normalisation (`normalize`); as written, where one cannot be."""
    if answer is None or truth is None:
        return answer is None and truth is None
    try:
        return normalize(answer) == normalize(truth)
    except _Unreadable:
        return answer == truth


def compute_score(solution_str: str, ground_truth: str, format_score: float = 0.0, score: float = 1.0) -> float:
    """`score` for the right answer, `format_score` for a wrong one, 0.0 when no box was found.

    A ground truth written boxed (`\\boxed{3}`, as some datasets store it) is read as its content.
    """
    answer = extract_solution(solution_str)
    if answer is None:
        return 0.0
    return score if is_equiv(answer, truth_of(ground_truth)) else format_score


def truth_of(ground_truth: str) -> str:
    """A ground truth as an answer: the content of its box when it is written boxed, else itself."""
    boxed = last_boxed(ground_truth)
    return ground_truth if boxed is None else boxed


def normalize(answer: str) -> str:
    """An answer's canonical text, as verl's `strip_string` writes it (see the module's docstring)."""
    text = answer.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    text = text.replace("tfrac", "frac").replace("dfrac", "frac")
    text = text.replace("\\left", "").replace("\\right", "")
    text = text.replace("^{\\circ}", "").replace("^\\circ", "")
    text = text.replace("\\$", "")
    text = _without_unit(text)
    text = text.replace("\\%", "")
    text = text.replace(" .", " 0.").replace("{.", "{0.")
    if not text:
        return text
    if text[0] == ".":
        text = "0" + text
    sides = text.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # "k = 3", "x=3": the value
        text = sides[1]
    text = text.replace(" ", "")
    text = _SQRT_BARE.sub(r"\\sqrt{\1}", text)
    text = _braced_fracs(text)
    if text == "0.5":
        text = "\\frac{1}{2}"
    return _slash_as_frac(text)


class _Unreadable(ValueError):
    """An answer `normalize` cannot read: compared as written (verl's rule does so where its asserts fail)."""


def _without_unit(text: str) -> str:
    """`10\\text{ cm}` -> `10`: a trailing `\\text{ ...}` that starts with a space is a unit; two of them (`2\\text{ m
    by }3\\text{ m}`) are no unit but words, and the answer is compared as written."""
    parts = text.split("\\text{ ")
    if len(parts) > 2:
        raise _Unreadable(text)
    return parts[0]


def _braced_fracs(text: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{72}` -> `\\frac{1}{72}`, `\\frac{a}b` unchanged (as verl's)."""
    head, *parts = text.split("\\frac")
    out = [head]
    for part in parts:
        out.append("\\frac")
        if part.startswith("{"):
            out.append(part)
            continue
        if len(part) < 2:
            return text  # `\frac` with nothing to read: left as written
        numerator, denominator, tail = part[0], part[1], part[2:]
        if denominator == "{":
            out.append("{" + numerator + "}{" + tail)
        else:
            out.append("{" + numerator + "}{" + denominator + "}" + tail)
    return "".join(out)


def _slash_as_frac(text: str) -> str:
    """`3/4` -> `\\frac{3}{4}` when both sides are plain integers."""
    sides = text.split("/")
    if len(sides) != 2:
        return text
    numerator, denominator = sides
    if not (_is_int(numerator) and _is_int(denominator)):
        return text
    if text != f"{int(numerator)}/{int(denominator)}":  # "03/4", "+3/4": left as written
        return text
    return "\\frac{" + numerator + "}{" + denominator + "}"


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True
