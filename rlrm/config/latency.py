"""Reward latency specs (`reward.inject.latency`): the grammar, the distributions and trace files.

    dist = parse_latency("lognormal:-1:0.5")          # seconds; see GRAMMAR
    dist.sample(random.Random(0)), dist.mean(), dist.spec
    parse_latency("trace:latencies.csv:reward_s x0.1")  # measured latencies, replayed and scaled

Plain data and the standard library only: the profile schema checks a spec with it, and the
engine's injection (`rlrm.engine.rewards.inject`) draws from it at run time.
"""

from __future__ import annotations

import csv
import json
import math
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

GRAMMAR = (
    "none | 0 | fixed:S | uniform:A:B | normal:MU:SIGMA | lognormal:MU:SIGMA | pareto:SCALE:ALPHA | "
    "trace:PATH[:COLUMN] (seconds; optionally followed by ' xFACTOR')"
)

_ARITY = {"fixed": 1, "uniform": 2, "normal": 2, "lognormal": 2, "pareto": 2}


@dataclass(frozen=True)
class LatencyDist:
    """A distribution of reward latencies in seconds (every draw multiplied by `scale`).

    kind is none, fixed, uniform, normal (clipped at 0), lognormal (MU, SIGMA of the underlying
    normal), pareto (minimum SCALE, tail index ALPHA) or trace (measured latencies, resampled).
    """

    kind: str
    params: tuple[float, ...] = ()
    scale: float = 1.0
    source: str = ""  # trace: PATH or PATH:COLUMN, as written in the spec
    values: tuple[float, ...] = field(default=(), repr=False)  # trace: the latencies replayed

    def sample(self, rng: random.Random) -> float:
        """One latency in seconds, never negative, drawn from `rng` only."""
        return self.scale * _DRAWS[self.kind](self, rng)

    def mean(self) -> float:
        """The expected latency in seconds.

        Raises:
            ValueError: the mean is infinite (pareto with ALPHA <= 1).
        """
        if self.scale == 0:
            return 0.0
        return self.scale * _MEANS[self.kind](self)

    def scaled(self, factor: float) -> LatencyDist:
        """The same distribution with every draw multiplied by `factor` (>= 0)."""
        if not (math.isfinite(factor) and factor >= 0):
            raise ValueError(f"latency scale factor must be a finite number >= 0, got {factor!r}")
        return replace(self, scale=self.scale * factor)

    @property
    def is_zero(self) -> bool:
        """True when every draw is 0 (no latency to inject)."""
        return self.kind == "none" or self.scale == 0 or (self.kind == "fixed" and self.params[0] == 0)

    @property
    def spec(self) -> str:
        """The canonical spec, e.g. `uniform:1:40 x0.0123`; parse_latency(dist.spec) == dist."""
        if self.kind == "none":
            base = "none"
        elif self.kind == "trace":
            base = f"trace:{self.source}"
        else:
            base = ":".join([self.kind, *map(_fmt, self.params)])
        return base if self.scale == 1 else f"{base} x{_fmt(self.scale)}"

    def __str__(self) -> str:
        return self.spec


def _normal_clipped_mean(d: LatencyDist) -> float:
    # E[max(0, X)] for X ~ N(mu, sigma^2) = mu * Phi(mu/sigma) + sigma * phi(mu/sigma)
    mu, sigma = d.params
    if sigma == 0:
        return max(0.0, mu)
    z = mu / sigma
    cdf = 0.5 * (1 + math.erf(z / math.sqrt(2)))
    pdf = math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    return mu * cdf + sigma * pdf


def _pareto_mean(d: LatencyDist) -> float:
    minimum, alpha = d.params
    if alpha <= 1 and minimum > 0:
        raise ValueError(f"latency {d.spec} has an infinite mean (pareto needs ALPHA > 1 for a finite one)")
    return minimum * alpha / (alpha - 1) if minimum > 0 else 0.0


_DRAWS: dict[str, Callable[[LatencyDist, random.Random], float]] = {
    "none": lambda d, rng: 0.0,
    "fixed": lambda d, rng: d.params[0],
    "uniform": lambda d, rng: rng.uniform(*d.params),
    "normal": lambda d, rng: max(0.0, rng.normalvariate(*d.params)),
    "lognormal": lambda d, rng: rng.lognormvariate(*d.params),
    # paretovariate is (1 - U) ** (-1/alpha) with 1 - U in (0, 1]: classical Pareto with minimum 1
    "pareto": lambda d, rng: d.params[0] * rng.paretovariate(d.params[1]),
    "trace": lambda d, rng: rng.choice(d.values),
}


def _exp_or_inf(x: float) -> float:
    """e**x, infinite where it overflows a float (lognormal:1000:1's mean): callers refuse a mean that is not finite."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


_MEANS: dict[str, Callable[[LatencyDist], float]] = {
    "none": lambda d: 0.0,
    "fixed": lambda d: d.params[0],
    "uniform": lambda d: (d.params[0] + d.params[1]) / 2,
    "normal": _normal_clipped_mean,
    "lognormal": lambda d: _exp_or_inf(d.params[0] + d.params[1] ** 2 / 2),
    "pareto": _pareto_mean,
    "trace": lambda d: math.fsum(d.values) / len(d.values),
}


def parse_latency(spec: str) -> LatencyDist:
    """Parse a latency spec (see GRAMMAR), e.g. `fixed:0.5`, `pareto:0.1:1.5`, `trace:lat.csv:reward_s x0.1`.

    Args:
        spec: the spec; a trace spec reads its file.

    Returns:
        The LatencyDist it describes.

    Raises:
        ValueError: a malformed spec or parameter (the message quotes it and lists GRAMMAR), or an
            unusable trace file (the message names the file).
    """
    if not isinstance(spec, str):
        raise _bad(spec, f"expected a string, got {type(spec).__name__}")
    body, factor = _split_factor(spec)
    if body.lower() == "none" or _is_zero_number(body):
        return LatencyDist("none").scaled(factor)
    kind, _, rest = body.partition(":")
    kind = kind.strip().lower()
    if kind == "trace":
        return _parse_trace(spec, rest.strip()).scaled(factor)
    if kind not in _ARITY:
        bare_number = _float_or_none(body) is not None
        raise _bad(spec, "a bare number other than 0; write fixed:S" if bare_number else f"unknown kind {kind!r}")
    parts = rest.split(":") if rest else []
    if len(parts) != _ARITY[kind]:
        raise _bad(spec, f"{kind} takes {_ARITY[kind]} number{'s' * (_ARITY[kind] > 1)}, got {len(parts)}")
    params = tuple(_number(spec, part) for part in parts)
    _check_params(spec, kind, params)
    return LatencyDist(kind, params).scaled(factor)


def _split_factor(spec: str) -> tuple[str, float]:
    body, sep, tail = spec.strip().rpartition(" x")
    if not sep or _float_or_none(tail) is None:  # no factor (a trace path may hold " x")
        return spec.strip(), 1.0
    factor = _number(spec, tail)
    if factor < 0:
        raise _bad(spec, f"the factor x{tail} must be >= 0")
    return body.strip(), factor


def _is_zero_number(text: str) -> bool:
    try:
        return float(text) == 0
    except ValueError:
        return False


def _number(spec: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _bad(spec, f"{text.strip()!r} is not a number") from None
    if not math.isfinite(value):
        raise _bad(spec, f"{text.strip()!r} is not a finite number")
    return value


_PARAM_RULES: dict[
    str, tuple[Callable[[tuple[float, ...]], bool], str]
] = {  # kind -> (is the params tuple acceptable, what to say when it is not)
    "fixed": (lambda p: p[0] >= 0, "S must be >= 0"),
    "uniform": (lambda p: 0 <= p[0] <= p[1], "needs 0 <= A <= B"),
    "normal": (lambda p: p[0] >= 0 and p[1] >= 0, "MU and SIGMA must be >= 0"),
    "lognormal": (lambda p: p[1] >= 0, "SIGMA must be >= 0 (MU, the log of the median, may be negative)"),
    "pareto": (lambda p: p[0] >= 0 and p[1] > 0, "needs SCALE >= 0 and ALPHA > 0"),
}


def _check_params(spec: str, kind: str, params: tuple[float, ...]) -> None:
    accepts, rule = _PARAM_RULES[kind]
    if not accepts(params):
        raise _bad(spec, rule)


def _bad(spec: Any, reason: str) -> ValueError:
    return ValueError(f"bad latency spec {spec!r}: {reason}; accepted: {GRAMMAR}")


def _parse_trace(spec: str, rest: str) -> LatencyDist:
    if not rest:
        raise _bad(spec, "trace needs a file: trace:PATH or trace:PATH:COLUMN")
    path, column = rest, None
    if not Path(rest).expanduser().is_file() and ":" in rest:  # a path may itself hold ':'
        path, column = rest.rsplit(":", 1)
        if not column:
            raise _bad(spec, "empty COLUMN after the trace path")
    values = load_trace(Path(path).expanduser(), column)
    return LatencyDist("trace", source=rest, values=values)


def load_trace(path: Path, column: str | None = None) -> tuple[float, ...]:
    """Measured latencies (seconds) from a CSV column or a JSON file.

    Args:
        path: a `.json` file (a list of numbers, a list of objects, or an object of lists), or a
            CSV file (with a header row, or numbers only: then columns are named 0, 1, ...).
        column: the column or key; default: the first whose values are all numbers.

    Returns:
        The latencies, in file order.

    Raises:
        ValueError: the file is missing or unreadable, or holds no usable latencies.
    """
    if not path.is_file():
        raise ValueError(f"latency trace {str(path)!r} does not exist; give a CSV or JSON file of latencies in seconds")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"latency trace {str(path)!r} cannot be read: {exc}") from None
    try:
        values = _json_values(text, column) if path.suffix.lower() == ".json" else _csv_values(text, column)
    except ValueError as exc:
        raise ValueError(f"latency trace {str(path)!r}: {exc}") from None
    if not values:
        raise ValueError(f"latency trace {str(path)!r} holds no latencies")
    bad = next((v for v in values if not (math.isfinite(v) and v >= 0)), None)
    if bad is not None:
        raise ValueError(f"latency trace {str(path)!r} holds {bad!r}; latencies must be finite seconds >= 0")
    return tuple(values)


def is_number(value: Any) -> bool:
    """An int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json_values(text: str, column: str | None) -> list[float]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(data, dict):
        columns = {k: v for k, v in data.items() if isinstance(v, list)}
    elif isinstance(data, list) and data and all(isinstance(row, dict) for row in data):
        keys = list(dict.fromkeys(k for row in data for k in row))
        columns = {k: [row.get(k) for row in data] for k in keys}
    elif isinstance(data, list):
        if column is not None:
            raise ValueError(f"is a plain list, so it has no column {column!r}; drop ':{column}'")
        columns, column = {"": data}, ""
    else:
        raise ValueError("must hold a list of numbers, a list of objects or an object of lists")
    return _pick_column(columns, column)


def _csv_values(text: str, column: str | None) -> list[float]:
    rows = [row for row in csv.reader(text.splitlines()) if any(cell.strip() for cell in row)]
    if not rows:
        return []
    header = rows[0]
    if all(_float_or_none(cell) is not None for cell in header):  # numbers only: no header row
        header, body = [str(i) for i in range(len(header))], rows
    else:
        header, body = [cell.strip() for cell in header], rows[1:]
    columns = {}
    for i, name in enumerate(header):
        cells = [row[i].strip() for row in body if i < len(row) and row[i].strip()]  # blank cells: no sample
        columns[name] = [_cell_value(cell) for cell in cells]
    return _pick_column(columns, column)


def _float_or_none(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def _cell_value(cell: str) -> float | str:
    value = _float_or_none(cell)
    return cell if value is None else value


def _pick_column(columns: dict[str, list[Any]], column: str | None) -> list[float]:
    if column is None and not any(columns.values()):
        return []  # a header and no rows
    if column is None:
        column = next((k for k, v in columns.items() if v and all(is_number(x) for x in v)), None)
        if column is None:
            raise ValueError(f"has no column of numbers (columns: {', '.join(map(str, columns)) or 'none'})")
    if column not in columns:
        raise ValueError(f"has no column {column!r} (columns: {', '.join(map(str, columns)) or 'none'})")
    bad = next((x for x in columns[column] if not is_number(x)), None)
    if bad is not None:
        where = f"column {column!r}" if column else "the list"
        raise ValueError(f"{where} holds a non-number {bad!r}")
    return [float(x) for x in columns[column]]


def _fmt(x: float) -> str:
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text
