"""The built-in calculator tool: exact arithmetic over + - * / ( ) and decimals, parsed by hand (never eval).

    await calculator("12 + 34 * (2 - 0.5)")   # -> "63"
    await calculator("1/0")                   # -> "error: division by zero"

A recursive-descent parser over a bounded input (MAX_INPUT_CHARS) computes with Fractions, so
0.1 + 0.2 is 0.3 and 1/3 is printed to RESULT_DECIMALS places; a result (or an intermediate
value) with more than MAX_DIGITS digits is refused, so `9*9*9...` cannot eat memory. Every
problem with the input comes back as an "error: ..." string: the policy reads it as its
observation, and the tool runner counts it (rlrm/engine/agent/tools.py).
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_INPUT_CHARS = 200
MAX_DIGITS = 60
RESULT_DECIMALS = 6
_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?|\.\d+)|(.))")


class CalcError(ValueError):
    """The expression cannot be computed; the message is what the policy is shown."""


def evaluate(text: str) -> Fraction:
    """The exact value of the arithmetic expression `text` (raises CalcError with a short reason)."""
    if len(text) > MAX_INPUT_CHARS:
        raise CalcError(f"expression longer than {MAX_INPUT_CHARS} characters")
    parser = _Parser(_tokens(text))
    if not parser.tokens:
        raise CalcError("empty expression")
    value = parser.expression()
    if parser.pos < len(parser.tokens):
        raise CalcError(f"unexpected {parser.tokens[parser.pos][1]!r}")
    return value


def format_value(value: Fraction) -> str:
    """An integer as such, anything else as a decimal rounded to RESULT_DECIMALS places (trailing zeros dropped)."""
    if value.denominator == 1:
        return str(value.numerator)
    scaled = round(value * 10**RESULT_DECIMALS)
    sign = "-" if scaled < 0 else ""
    whole, frac = divmod(abs(scaled), 10**RESULT_DECIMALS)
    digits = str(frac).rjust(RESULT_DECIMALS, "0").rstrip("0")
    return f"{sign}{whole}.{digits}" if digits else f"{sign}{whole}"


async def calculator(arguments: str) -> str:
    """The tool: the value of `arguments`, or "error: ..." naming what is wrong with it."""
    try:
        return format_value(evaluate(arguments))
    except CalcError as exc:
        return f"error: {exc}"


def _tokens(text: str) -> list[tuple[str, str]]:
    out = []
    for number, other in _TOKEN.findall(text.strip()):
        if number:
            out.append(("num", number))
        elif other in "+-*/()":
            out.append(("op", other))
        else:
            raise CalcError(f"unexpected {other!r}: only numbers, + - * / and parentheses")
    return out


class _Parser:
    """expression := term (('+'|'-') term)* ; term := factor (('*'|'/') factor)* ; factor := ('+'|'-') factor | number | '(' expression ')'."""

    def __init__(self, tokens: list[tuple[str, str]]):
        self.tokens, self.pos = tokens, 0

    def _peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def _take(self) -> tuple[str, str]:
        if self.pos >= len(self.tokens):
            raise CalcError("expression ends too early")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def expression(self) -> Fraction:
        value = self.term()
        while self._peek() in ("+", "-"):
            op = self._take()[1]
            value = _bounded(value + self.term() if op == "+" else value - self.term())
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while self._peek() in ("*", "/"):
            op = self._take()[1]
            right = self.factor()
            if op == "/" and right == 0:
                raise CalcError("division by zero")
            value = _bounded(value * right if op == "*" else value / right)
        return value

    def factor(self) -> Fraction:
        kind, text = self._take()
        if kind == "num":
            return _bounded(Fraction(text))
        if text in ("+", "-"):
            value = self.factor()
            return -value if text == "-" else value
        if text == "(":
            value = self.expression()
            if self._peek() != ")":
                raise CalcError("unbalanced parentheses")
            self._take()
            return value
        raise CalcError(f"unexpected {text!r}")


def _bounded(value: Fraction) -> Fraction:
    if len(str(abs(value.numerator))) > MAX_DIGITS or len(str(value.denominator)) > MAX_DIGITS:
        raise CalcError(f"a value has more than {MAX_DIGITS} digits")
    return value
