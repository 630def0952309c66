"""Score invariance of a served DisRM: the same samples scored one at a time, in batches of 8 and of
the server's max batch, right- and left-padded, must get the same scores up to the dtype's noise.

    settings = InvarianceSettings(max_batch=64, dtype="float32")
    report = await check_invariance(balancer, model_name, ids, groups, settings, timeout_s=30)
    report["passed"], report["comparisons"]        # max / p99 abs diff and rank flips per setting

Batch composition must not move a score: a reward model whose scores shift with its batch-mates or
its padding gives GRPO advantages that depend on how the server happened to batch (a known issue of
reward-model evaluation: padding side, missing position ids, batch statistics left in train mode).
Each setting sends its batches one request at a time, each request holding exactly one batch, so the
server runs exactly that batch (`/classify` keeps a request's inputs together); left padding uses
rlrm's `padding_side` request field. The reference is one sample per request (no padding at all).
Requests and answers are in the servers' backend's /classify shape (`backend`: vLLM's, which the embedded server
speaks, by default; SGLang's native one; rlrm/launch/fleet/backends.py), the score the raw logit either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlrm.call_errors import BadRequest
from rlrm.launch.fleet.backends import Backend, backend_for

# Allowed |difference| per dtype, relative to max(1, RMS of the reference scores): a few units in the
# last place of the dtype's mantissa, after a reduction order change (float32 2^-23, bf16 2^-8, fp16 2^-11).
DTYPE_TOLERANCE = {"float32": 1e-4, "bfloat16": 2**-5, "float16": 2**-8}
SMALL_BATCH = 8


@dataclass(frozen=True)
class InvarianceSettings:
    max_batch: int = 64  # the server's max batch (reward.server.max_batch)
    dtype: str = "float32"  # the served dtype, which sets the tolerance
    tolerance: float | None = None  # absolute; None: DTYPE_TOLERANCE[dtype] x max(1, RMS of the scores)


def settings_to_run(samples: int, max_batch: int) -> list[tuple[str, int, str]]:
    """(name, batch size, padding side) of every setting compared against one at a time."""
    sizes = sorted({min(SMALL_BATCH, samples), min(max_batch, samples)} - {1})
    runs = [(f"batch {b}, right-padded", b, "right") for b in sizes]
    runs += [(f"batch {b}, left-padded", b, "left") for b in sizes]
    return runs


def compare_scores(reference: np.ndarray, other: np.ndarray, groups: list[str], tolerance: float) -> dict:
    """max and p99 |other - reference|, and rank flips: pairs of one group (or of all samples when no
    group has two) that the two orders rank oppositely, each separating them by more than `tolerance`."""
    diff = np.abs(other.astype(np.float64) - reference.astype(np.float64))
    members: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    sets = [m for m in members.values() if len(m) > 1] or [list(range(len(reference)))]
    flips = 0
    for idx in sets:
        a, b = reference[idx].astype(np.float64), other[idx].astype(np.float64)
        da, db = a[:, None] - a[None, :], b[:, None] - b[None, :]  # [k, k] pairwise differences
        flips += int(np.triu((da * db < 0) & (np.abs(da) > tolerance) & (np.abs(db) > tolerance), 1).sum())
    finite = bool(np.isfinite(other).all())
    return {
        "max_abs_diff": float(diff.max()) if len(diff) else 0.0,
        "p99_abs_diff": float(np.quantile(diff, 0.99)) if len(diff) else 0.0,
        "rank_flips": flips,
        "passed": finite and (float(diff.max()) if len(diff) else 0.0) <= tolerance and flips == 0,
    }


async def score_batches(
    balancer,
    model: str | None,
    ids: list[list[int]],
    batch: int,
    side: str,
    timeout_s: float,
    backend: Backend | str = "embedded",
) -> np.ndarray:
    """[B] float32 scores, sent `batch` sequences per request, one request at a time."""
    engine = backend_for(backend)
    out: list[float] = []
    for start in range(0, len(ids), batch):
        body = engine.classify_body(model, ids[start : start + batch])
        if side == "left":
            body["padding_side"] = "left"
        answer = await balancer.post("/classify", body, timeout_s)
        out += [s if s is not None else np.nan for s in engine.classify_scores(answer)]
    return np.asarray(out, dtype=np.float32)


async def check_invariance(
    balancer,
    model: str | None,
    ids: list[list[int]],
    groups: list[str],
    settings: InvarianceSettings,
    timeout_s: float,
    backend: Backend | str = "embedded",
) -> dict:
    """Every setting of `settings_to_run` against one sample per request; `passed` when all are within tolerance.
    `backend`: the servers' (`reward.server.backend`), whose /classify shape the requests take."""
    reference = await score_batches(balancer, model, ids, 1, "right", timeout_s, backend)
    finite = reference[np.isfinite(reference)].astype(np.float64)
    scale = max(1.0, float(np.sqrt(np.mean(finite**2)))) if len(finite) else 1.0
    tolerance = settings.tolerance if settings.tolerance is not None else DTYPE_TOLERANCE[settings.dtype] * scale
    comparisons, skipped = [], []
    for name, batch, side in settings_to_run(len(ids), settings.max_batch):
        try:
            scores = await score_batches(balancer, model, ids, batch, side, timeout_s, backend)
        except BadRequest as exc:
            if side != "left":
                raise
            skipped.append(f"{name}: the server refused padding_side (not rlrm's server?): {exc}")
            continue
        comparisons.append(
            {"name": name, "batch": batch, "padding": side, **compare_scores(reference, scores, groups, tolerance)}
        )
    worst = max(comparisons, key=lambda c: c["max_abs_diff"], default=None)
    return {
        "samples": len(ids),
        "dtype": settings.dtype,
        "tolerance": tolerance,
        "max_batch": settings.max_batch,
        "passed": bool(np.isfinite(reference).all()) and all(c["passed"] for c in comparisons),
        # the headline numbers, flat (rlrm report lists a summary's scalars)
        "max_abs_diff": worst["max_abs_diff"] if worst else 0.0,
        "p99_abs_diff": max((c["p99_abs_diff"] for c in comparisons), default=0.0),
        "rank_flips": sum(c["rank_flips"] for c in comparisons),
        "worst_setting": worst["name"] if worst else None,
        "skipped": skipped,
        "comparisons": comparisons,
        "reference_scores": reference.tolist(),
    }
