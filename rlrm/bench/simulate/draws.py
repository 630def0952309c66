"""Every random number of a simulated run, drawn up front with numpy and shared by all modes.

    draws = draw_workload(spec)                     # lengths and reward times of every sample of every step
    draws.resp_len[k - 1]                           # [N] response tokens of step k's samples (prompt-major)
    sample(parse_latency("pareto:1:1.5"), rng, 5)   # five draws of a latency-grammar distribution

Distributions are the latency grammar's (rlrm.config.latency.LatencyDist); this module only
draws them in bulk. Modes see the same samples, lengths and latencies (common random numbers),
so the differences between modes are the schedules', not the draws'.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlrm.config.latency import LatencyDist, parse_latency


def sample(dist: LatencyDist, rng: np.random.Generator, size) -> np.ndarray:
    """`size` draws of `dist` (seconds, or tokens for a length distribution), as float64."""
    kind, p = dist.kind, dist.params
    if kind == "none":
        values = np.zeros(size)
    elif kind == "fixed":
        values = np.full(size, float(p[0]))
    elif kind == "uniform":
        values = rng.uniform(p[0], p[1], size)
    elif kind == "normal":
        values = np.maximum(0.0, rng.normal(p[0], p[1], size))
    elif kind == "lognormal":
        values = rng.lognormal(p[0], p[1], size)
    elif kind == "pareto":  # numpy's pareto is Lomax: + 1 gives the classical Pareto with minimum 1
        values = p[0] * (rng.pareto(p[1], size) + 1.0)
    elif kind == "trace":
        values = rng.choice(np.asarray(dist.values, dtype=float), size)
    else:  # a kind the grammar gained and this module does not know yet
        raise ValueError(f"cannot draw latency kind {kind!r}")
    return values * dist.scale


@dataclass
class Draws:
    """Per step k (row k-1): prompt lengths per prompt, and per sample its response length, the
    reward loop's time (every attempt, timeout and backoff) and whether it failed for good."""

    prompt_len: np.ndarray  # [steps, P] int
    resp_len: np.ndarray  # [steps, N] int
    reward_s: np.ndarray  # [steps, N] seconds from the call's start to its result
    failed: np.ndarray  # [steps, N] bool: every attempt failed
    attempts: np.ndarray  # [steps, N] int: attempts made
    timeouts: np.ndarray  # [steps] attempts that timed out
    injected_failures: np.ndarray  # [steps] attempts failed by fail_rate
    latency_mean: np.ndarray  # [steps] mean injected latency of the successful attempts
    cached: np.ndarray  # [steps, N] bool: answered by the reward cache (no attempt made)
    tool_s: np.ndarray | None = None  # [steps, N] seconds its tool calls add to each sample's generation


def draw_workload(
    spec, latency: bool = True, lengths: Draws | None = None, first_latency: np.ndarray | None = None
) -> Draws:
    """Draw every sample of `spec`'s run; `latency=False` draws the zero-latency baseline's.

    `lengths`: draws of the same spec whose prompt and response lengths to reuse (they do not
    depend on the latency; the same seed would draw them again).
    `first_latency`: [steps, N] seconds, the first attempt's latency of every sample as a measured
    run drew it (rlrm/bench/simulate/replay.py), instead of drawing it; retries still draw theirs.
    """
    w, r = spec.workload, spec.reward
    steps, p, n = w.steps, w.prompts_per_step, w.samples_per_prompt
    if lengths is not None:
        prompt, resp = lengths.prompt_len, lengths.resp_len
    else:
        rng = np.random.default_rng([w.seed, 1])
        prompt = np.maximum(1, np.rint(sample(parse_latency(w.prompt_tokens), rng, (steps, p)))).astype(np.int64)
        resp = np.rint(sample(parse_latency(w.response_tokens), rng, (steps, p * n)))
        resp = np.clip(resp, 1, w.max_response_tokens).astype(np.int64)
    dist = parse_latency(r.latency).scaled(r.latency_scale) if latency else parse_latency("none")
    reward_rng = np.random.default_rng([w.seed, 2, int(latency)])
    if first_latency is not None and first_latency.shape != (steps, p * n):
        raise ValueError(f"first_latency has shape {first_latency.shape}, the run has {(steps, p * n)} samples")
    # the cache's hits from a stream of their own: a hit rate of 0 leaves every other draw as it was
    cached = np.random.default_rng([w.seed, 4]).random((steps, p * n)) < r.cache_hit_rate
    reward_s, failed, attempts, timeouts, injected, latency_mean = _reward_times(
        dist, r, reward_rng, (steps, p * n), first_latency, cached
    )
    draws = Draws(prompt, resp, reward_s, failed, attempts, timeouts, injected, latency_mean, cached)
    draws.tool_s = tool_times(spec.tools, np.random.default_rng([w.seed, 3]), (steps, p * n), latency)
    return draws


def tool_times(tools, rng: np.random.Generator, shape, latency: bool = True) -> np.ndarray:
    """[steps, N] seconds: each sample's `calls_per_sample` tool latencies, each cut at `timeout_s`, summed
    (zeros for the zero-latency baseline or without calls)."""
    if not latency or tools.calls_per_sample == 0:
        return np.zeros(shape)
    whole = int(tools.calls_per_sample)
    count = whole + (rng.random(shape) < tools.calls_per_sample - whole)  # [steps, N] calls of each sample
    calls = np.minimum(sample(parse_latency(tools.latency), rng, (*shape, whole + 1)), tools.timeout_s)
    return np.where(np.arange(whole + 1) < count[..., None], calls, 0.0).sum(-1)


def _reward_times(
    dist: LatencyDist,
    r,
    rng: np.random.Generator,
    shape,
    first: np.ndarray | None = None,
    cached: np.ndarray | None = None,
):
    """The reward loop's attempts per sample, as rlrm/engine/rewards/loop.py makes them.

    An attempt sleeps its latency, then fails with `fail_rate` or runs the function (`base_s`);
    longer than `timeout_s` it is cut there and fails as a timeout. A failed attempt is retried
    after min(backoff_max_s, backoff_s * 2^attempt) * U[0.5, 1.0) until `max_retries`. A sample the
    cache answers (`cached`) makes no attempt: 0 s, never failed, not counted in the latency mean.
    """
    steps, width = shape
    count = lambda where, weights=None: np.bincount(where // width, weights=weights, minlength=steps)  # noqa: E731
    # The first attempt of every sample, on whole [steps, N] arrays.
    latency = sample(dist, rng, shape) if first is None else np.asarray(first, dtype=float)
    injected_fail = rng.random(shape) < r.fail_rate if r.fail_rate > 0 else np.zeros(shape, dtype=bool)
    spent = latency + np.where(injected_fail, 0.0, r.base_s) if r.fail_rate > 0 else latency + r.base_s
    hit = np.zeros(shape, dtype=bool) if cached is None else np.asarray(cached, dtype=bool)
    spent = np.where(hit, 0.0, spent)
    injected_fail = injected_fail & ~hit
    timed_out = spent > r.timeout_s
    ok = ~(injected_fail | timed_out)
    total = np.minimum(spent, r.timeout_s).ravel()
    attempts = np.where(hit, 0, 1).astype(np.int16).ravel()  # at most max_retries + 1
    timeouts = timed_out.sum(1)
    injected = (injected_fail & ~timed_out).sum(1)
    called = ok & ~hit
    lat_sum, lat_count = np.where(called, latency, 0.0).sum(1), called.sum(1).astype(float)
    idx = np.flatnonzero(~ok)  # samples still trying, flat
    for attempt in range(1, r.max_retries + 1):
        if idx.size == 0:
            break
        delay = min(r.backoff_max_s, r.backoff_s * 2 ** (attempt - 1))  # the backoff before this retry
        latency = sample(dist, rng, idx.size)
        injected_fail = rng.random(idx.size) < r.fail_rate
        spent = latency + np.where(injected_fail, 0.0, r.base_s)
        timed_out = spent > r.timeout_s
        ok = ~(injected_fail | timed_out)
        total[idx] += delay * rng.uniform(0.5, 1.0, idx.size) + np.minimum(spent, r.timeout_s)
        attempts[idx] += 1
        timeouts += count(idx[timed_out])
        injected += count(idx[injected_fail & ~timed_out])
        lat_sum += count(idx[ok], latency[ok])
        lat_count += count(idx[ok])
        idx = idx[~ok]
    failed = np.zeros(steps * width, dtype=bool)
    failed[idx] = True
    return (
        total.reshape(shape),
        failed.reshape(shape),
        attempts.reshape(shape),
        timeouts,
        injected,
        lat_sum / np.maximum(lat_count, 1),
    )
