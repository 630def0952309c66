"""Pure fitting helpers for calibration: non-negative linear cost models and a clipped-normal length.

fit = fit_cost(y, {"per_token": tokens, "per_iteration": longest})   # y ~ a + sum(b_i * x_i), all >= 0
fit.coef["per_token"], fit.intercept, fit.rel_error, fit.dropped
mu, sigma = fit_clipped_normal(mean=13.2, clip_ratio=0.01, upper=20)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

MIN_SPREAD = 0.03  # a regressor varying less than this (relative std) cannot be told from the intercept


@dataclass
class CostFit:
    intercept: float
    coef: dict[str, float]
    rel_error: float  # RMS of the residuals over the mean of y
    points: int
    dropped: list[str] = field(default_factory=list)  # regressors that did not vary enough to fit
    proportional: str | None = None  # regressor y was taken proportional to (no intercept) when nothing varied
    outliers: int = 0  # points left out as outliers (a shared machine's stalls)

    def predict(self, **x: float) -> float:
        return self.intercept + sum(c * x[name] for name, c in self.coef.items())


OUTLIER_SIGMAS = 3.5  # residuals beyond this many robust standard deviations are left out


def fit_cost(y, regressors: dict[str, np.ndarray], proportional_to: str | None = None) -> CostFit:
    """Least squares y ~ intercept + sum(coef * x) with every term >= 0 (exact NNLS over subsets),
    fitted again without the points whose residual is an outlier (beyond OUTLIER_SIGMAS robust
    standard deviations, 1.4826 MAD): on a shared machine a few steps stall for seconds.

    A regressor whose relative spread is under MIN_SPREAD is dropped (its cost folds into the
    intercept). When every regressor is dropped and `proportional_to` is given, y is taken
    proportional to that regressor (no intercept): a per-token cost scales to other workloads,
    a constant would not.
    """
    y = np.asarray(y, dtype=float)
    xs = {k: np.asarray(v, dtype=float) for k, v in regressors.items()}
    first = _fit_once(y, xs, proportional_to)
    residual = y - np.array([first.predict(**{k: xs[k][i] for k in xs}) for i in range(y.size)])
    spread = 1.4826 * float(np.median(np.abs(residual - np.median(residual)))) if y.size else 0.0
    keep = np.abs(residual) <= OUTLIER_SIGMAS * spread if spread > 0 else np.ones(y.size, dtype=bool)
    if keep.all() or keep.sum() < 3:
        return first
    fit = _fit_once(y[keep], {k: v[keep] for k, v in xs.items()}, proportional_to)
    fit.outliers = int((~keep).sum())
    return fit


def _fit_once(y: np.ndarray, xs: dict[str, np.ndarray], proportional_to: str | None) -> CostFit:
    if y.size == 0:
        return CostFit(0.0, {k: 0.0 for k in xs}, math.nan, 0)
    usable = [k for k, v in xs.items() if v.size > 2 and v.mean() > 0 and v.std() / v.mean() >= MIN_SPREAD]
    dropped = [k for k in xs if k not in usable]
    if not usable and proportional_to is not None and xs[proportional_to].mean() > 0:
        slope = float(y.sum() / xs[proportional_to].sum())
        fit = CostFit(
            0.0, {k: (slope if k == proportional_to else 0.0) for k in xs}, 0.0, y.size, dropped, proportional_to
        )
        fit.rel_error = _rel_error(y, slope * xs[proportional_to])
        return fit
    best = None
    for size in range(len(usable), -1, -1):
        for subset in itertools.combinations(usable, size):
            a = np.column_stack([np.ones_like(y)] + [xs[k] for k in subset])
            sol, *_ = np.linalg.lstsq(a, y, rcond=None)
            contribution = sol * np.abs(a).mean(0)  # each term's share of y, to tell a negative term from rounding
            if (contribution < -1e-6 * max(abs(float(y.mean())), 1e-12)).any():
                continue
            sol = np.maximum(sol, 0.0)
            sse = float(((a @ sol - y) ** 2).sum())
            if best is None or sse < best[0] - 1e-12:
                best = (sse, subset, sol)
    _, subset, sol = best if best is not None else (0.0, (), np.array([0.0]))
    coef = {k: 0.0 for k in xs}
    coef.update({k: float(c) for k, c in zip(subset, sol[1:])})
    fit = CostFit(float(sol[0]), coef, 0.0, y.size, dropped)
    fit.rel_error = _rel_error(y, np.array([fit.predict(**{k: xs[k][i] for k in xs}) for i in range(y.size)]))
    return fit


def _rel_error(y: np.ndarray, predicted: np.ndarray) -> float:
    mean = abs(float(y.mean()))
    return float(np.sqrt(((predicted - y) ** 2).mean()) / mean) if mean > 0 else 0.0


def _phi(z: float) -> float:
    return math.exp(-z * z / 2) / math.sqrt(2 * math.pi)


def _cdf(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def clipped_mean(mu: float, sigma: float, upper: float) -> float:
    """E[min(X, upper)] for X ~ N(mu, sigma^2)."""
    if sigma <= 0:
        return min(mu, upper)
    a = (upper - mu) / sigma
    return mu - (sigma * _phi(a) - (upper - mu) * (1 - _cdf(a)))


def fit_clipped_normal(
    mean: float, clip_ratio: float, upper: float, spread: float | None = None
) -> tuple[float, float]:
    """(mu, sigma) of a normal that, cut at `upper`, has this mean and puts `clip_ratio` at the cut.

    Without clipping (ratio 0 or 1) the share at the cut says nothing: then sigma is `spread`
    (e.g. a std estimated from per-step min/max) and mu the mean.
    """
    if not 0.0 < clip_ratio < 0.5 or mean >= upper:
        return float(mean), float(spread or 0.0)
    z = _inverse_cdf(1 - clip_ratio)  # mu = upper - z * sigma puts clip_ratio above upper
    lo, hi = 1e-6, max(upper, 1.0) * 10
    for _ in range(100):  # the clipped mean falls as sigma grows (mu moves down faster than the tail adds)
        sigma = (lo + hi) / 2
        if clipped_mean(upper - z * sigma, sigma, upper) > mean:
            lo = sigma
        else:
            hi = sigma
    sigma = (lo + hi) / 2
    return float(upper - z * sigma), float(sigma)


def _inverse_cdf(p: float) -> float:
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if _cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def expected_range_z(n: int) -> float:
    """E[max - min] / sigma of n normal draws, approximately (Blom's plotting position)."""
    if n < 2:
        return 1.0
    return 2 * _inverse_cdf((n - 0.375) / (n + 0.25))
