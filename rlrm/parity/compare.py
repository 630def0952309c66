"""Parity statistics: how far two score vectors for the same samples are apart, per sample, per
group, and where it matters for GRPO, in the advantages. Pure functions of arrays, no models.

    cmp = compare(legacy_scores, loop_scores, group_ids, Tolerances())
    cmp.summary["abs_diff_max"], cmp.summary["spearman"], cmp.summary["group_pearson"]
    passed, reasons = verdict(cmp.summary, Tolerances())

The loop scores (served, fp32) are the reference. A sample is within tolerance when

    |legacy - loop| <= atol + rtol * max(|loop|, scale)      scale = RMS of the loop scores

that is torch.allclose's rule, except that a score smaller than the batch's typical magnitude is
held to the typical magnitude. Rounding error in a DisRM score comes from the activations and head
weights that sum into it, whose size is set by the model, not by the score: a score near zero
carries the same absolute error as a large one (measured on the tiny DisRM, bf16 vs fp32: the
largest error, 0.079, sat on a score of -0.55, in a batch of RMS 1.57).

Near-ties. Two responses of one group often score almost the same (identical answers are common),
and a low-precision path may then order them either way. That is rounding, not a changed ranking:
a pair counts as tied when either path separates it by no more than the sum of the two samples'
tolerance bands (beyond that, no pair of within-tolerance scores can swap). Every ranking statistic
uses these ties: the rank-flip count and top-1 agreement per group, Kendall's tau-b per group and
Spearman's rho over all samples (ranks from `band_tied_ranks`; with bands of 0 a pair tied exactly in
either path is tied in both, so these are the usual average ranks only where both paths tie the same pairs).
Strict versions (exact ties only: every discordant pair counts) are reported beside them. Without this, two identical responses scored 1 ulp apart by one path (a server's
dynamic batch padded them differently) and exactly equal by the other took Spearman over 6 samples
from 1 to 0.9856, failing a fp32-vs-fp32 check whose Pearson was 1.000000.

What the band cannot see. The band follows the size of the scores, and a common offset is part of that size:
logits around -10 get a band of about 1.25 each, wider than the whole spread of a group scored -10 ... -8.8.
Every pair of such a group is then tied and every sample within tolerance, so a reward that ranks each group
in exactly the opposite order would look like rounding. GRPO ignores the offset (an advantage is a score minus
its group's mean), and so does one more ranking check, which uses no band: `group_pearson`, the Pearson
correlation of the two paths' scores after removing each group's mean, pooled over the groups (each group
weighs in by its spread). Rounding does not follow the scores, so it lowers this correlation only as far as it
is large against the groups' spread; a reordering lowers it directly (the two lowest of four evenly spaced
scores swapped in every group: 0.8; the order reversed: -1). It is judged when either path's deviations from
the group means exceed atol (RMS), the band's absolute floor: groups spread by rounding alone hold no ranking
to compare. When judged, an undefined value (one path scores every group flat) fails as a low one does.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from rlrm.errors import ConfigError
from rlrm.stats import quantile

# bf16 keeps 8 significant bits (one rounding: up to 2^-9 relative), but a bf16 forward rounds every
# activation of every layer, and a score is a sum of many rounded products. Measured on the tiny
# DisRM, 512 generated samples, bf16 against fp32, as a share of the score scale: median 0.3%,
# p99 5.6%, max 12.4%; and on a hand-made set one sample (near the model's decision boundary) moved
# 34%. The bugs the verdict must catch move nearly every sample: scoring the token before the last
# moved the median sample by 55% of the scale (97% of samples beyond 10%). So the band is 2^-3 of
# the scale plus 2^-5 absolute, and up to 1% of the samples may fall outside it (bf16's long tail);
# a small run (under 100 samples) is held to every sample.
DEFAULT_ATOL = 2.0**-5
DEFAULT_RTOL = 2.0**-3
DEFAULT_MAX_OUTSIDE_FRAC = 0.01
DEFAULT_MIN_SPEARMAN = 0.99
DEFAULT_MAX_RANK_FLIPS = 0
# bf16 against fp32 keeps group_pearson above 0.999 (measured: 0.99965 on the spread test DisRM, 0.99998 on the
# tiny DisRM, 32 x 4 generated samples); the two lowest of four evenly spaced scores swapped in every group take
# it to 0.8, the wrong token read (--score-offset 1) to -0.05, a reversed order to -1.
DEFAULT_MIN_GROUP_PEARSON = 0.9


@dataclass(frozen=True)
class Tolerances:
    """What the verdict allows (see the module docstring for the band rule)."""

    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    max_outside_frac: float = DEFAULT_MAX_OUTSIDE_FRAC  # share of finite samples allowed outside the band
    min_spearman: float = DEFAULT_MIN_SPEARMAN
    max_rank_flips: int = DEFAULT_MAX_RANK_FLIPS
    min_group_pearson: float = DEFAULT_MIN_GROUP_PEARSON  # judged when a path's group deviations exceed atol

    def __post_init__(self) -> None:
        """ConfigError naming the option of a tolerance no verdict can use (NaN turned a check off, inf passed all)."""
        for name in ("atol", "rtol", "max_outside_frac"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"--{name.replace('_', '-')} {value}: must be a finite number at least 0")
        for name in ("min_spearman", "min_group_pearson"):
            value = getattr(self, name)
            if not -1.0 <= value <= 1.0:  # NaN fails this too
                raise ConfigError(f"--{name.replace('_', '-')} {value}: a correlation lies between -1 and 1")

    def allowed_outside(self, finite_samples: int) -> int:
        """How many samples may fall outside the band (rounded down: a small run allows none)."""
        return math.floor(self.max_outside_frac * finite_samples + 1e-9)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Comparison:
    """Per-sample arrays (aligned with the inputs) and the summary statistics."""

    abs_diff: np.ndarray  # [B] NaN where either score is not finite
    rel_diff: np.ndarray  # [B]
    within_tolerance: np.ndarray  # [B] bool; False for a non-finite score
    legacy_adv: np.ndarray  # [B] NaN for samples of a group with a non-finite score
    loop_adv: np.ndarray  # [B]
    summary: dict = field(default_factory=dict)


def sample_diffs(test, ref) -> tuple[np.ndarray, np.ndarray]:
    """|test - ref| and |test - ref| / |ref| (the denominator floored at 1e-8), as float64."""
    test, ref = np.asarray(test, np.float64), np.asarray(ref, np.float64)
    abs_diff = np.abs(test - ref)
    return abs_diff, abs_diff / np.maximum(np.abs(ref), 1e-8)


def average_ranks(x) -> np.ndarray:
    """1-based ranks with ties given their average rank (as scipy.stats.rankdata)."""
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), np.float64)
    sorted_x = x[order]
    start = 0
    for end in range(1, len(x) + 1):
        if end == len(x) or sorted_x[end] != sorted_x[start]:
            ranks[order[start:end]] = (start + end + 1) / 2.0  # mean of ranks start+1 .. end
            start = end
    return ranks


def pearson(a, b) -> float:
    """Pearson correlation; NaN when either vector is constant or has fewer than 2 values."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if len(a) < 2:
        return math.nan
    da, db = a - a.mean(), b - b.mean()
    denom = math.sqrt(float((da * da).sum() * (db * db).sum()))
    return float((da * db).sum() / denom) if denom > 0 else math.nan


def spearman(a, b) -> float:
    """Spearman's rho: Pearson correlation of the average ranks."""
    return pearson(average_ranks(a), average_ranks(b))


def kendall_tau_b(a, b) -> float:
    """Kendall's tau-b (exact ties); NaN when either vector is constant. O(n^2): groups are small."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    i, j = np.triu_indices(len(a), k=1)
    sa, sb = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
    untied_a, untied_b = np.count_nonzero(sa), np.count_nonzero(sb)
    if untied_a == 0 or untied_b == 0:
        return math.nan
    return float((sa * sb).sum() / math.sqrt(untied_a * untied_b))


def tied_pairs(test, ref, bands, rows: slice = slice(None)) -> np.ndarray:
    """[r, n] True where the pair (i, j) is tied: either path separates it by no more than bands[i] + bands[j].

    `rows` picks the i of the block (all by default), so large inputs can be taken a block at a time.
    """
    test, ref, bands = (np.asarray(v, np.float64) for v in (test, ref, bands))
    pair_band = bands[rows, None] + bands[None, :]  # [r, n]
    return (np.abs(test[rows, None] - test[None, :]) <= pair_band) | (
        np.abs(ref[rows, None] - ref[None, :]) <= pair_band
    )


def band_tied_ranks(x, test, ref, bands, block: int = 1024) -> np.ndarray:
    """1-based ranks of `x` (test or ref) in which the pairs `tied_pairs` finds count as ties:

        rank_i = 1 + #{j: not tied with i, x_j < x_i} + #{j != i: tied with i} / 2

    With bands of 0 a pair tied in either path is tied here, so this is the average rank (`average_ranks`) of
    `x` only when the other path ties no other pair (the strict statistics use `average_ranks`). Ties by band need
    not be transitive, and each sample's rank still counts every pair it is in exactly once, so the mean
    rank stays (n + 1) / 2. Computed `block` rows at a time: [block, n] memory.
    """
    x = np.asarray(x, np.float64)
    ranks = np.empty(len(x), np.float64)
    for start in range(0, len(x), block):
        rows = slice(start, min(start + block, len(x)))
        tied = tied_pairs(test, ref, bands, rows)  # [r, n], each i tied with itself
        below = (x[None, :] < x[rows, None]) & ~tied
        ranks[rows] = 1.0 + below.sum(axis=1) + (tied.sum(axis=1) - 1) / 2.0
    return ranks


def spearman_tied(test, ref, bands) -> float:
    """Spearman's rho with differences inside the tolerance band as ties (see the module docstring)."""
    return pearson(band_tied_ranks(test, test, ref, bands), band_tied_ranks(ref, test, ref, bands))


def score_bands(ref, atol: float, rtol: float, scale: float | None = None) -> np.ndarray:
    """Per-sample tolerance: atol + rtol * max(|ref|, scale); scale defaults to the RMS of the finite ref scores."""
    ref = np.asarray(ref, np.float64)
    if scale is None:
        finite = ref[np.isfinite(ref)]
        scale = float(np.sqrt(np.mean(finite**2))) if len(finite) else 0.0
    return atol + rtol * np.maximum(np.abs(ref), scale)


def group_deviations(x, group_ids) -> np.ndarray:
    """[B] each score minus the mean of its group (what GRPO's advantages are made of), exactly 0 in a group whose
    scores are all equal (the mean of three 0.1s is 0.1 + 1 ulp)."""
    x = np.asarray(x, np.float64)
    _, inverse = np.unique(np.asarray([str(g) for g in group_ids]), return_inverse=True)
    size = np.bincount(inverse)
    mean = np.bincount(inverse, weights=x) / size
    low, high = np.full(len(size), np.inf), np.full(len(size), -np.inf)
    np.minimum.at(low, inverse, x)
    np.maximum.at(high, inverse, x)
    return np.where((low == high)[inverse], 0.0, x - mean[inverse])


def group_pearson(test, ref, group_ids) -> float:
    """Pearson correlation of `test` and `ref` after removing each group's mean from both, pooled over the groups;
    NaN when either has no spread within any group (see the module docstring)."""
    dt, dr = group_deviations(test, group_ids), group_deviations(ref, group_ids)
    denom = math.sqrt(float((dt * dt).sum() * (dr * dr).sum()))
    if denom == 0:
        return math.nan
    return min(1.0, max(-1.0, float((dt * dr).sum() / denom)))  # rounding can step past +-1


def group_spread(x, group_ids) -> float:
    """RMS of the scores' deviations from their group means (0 for no samples)."""
    d = group_deviations(x, group_ids)
    return float(np.sqrt(np.mean(d * d))) if len(d) else 0.0


def group_ranking(test, ref, bands) -> dict:
    """How one group's ranking changed from `ref` to `test`.

    Args:
        bands: [n] each sample's tolerance band (`score_bands`); a pair is tied within the sum of its two.

    Returns:
        kendall_tau (tau-b with pairs tied within their band as ties; NaN when every pair is tied),
        kendall_tau_strict (tau-b with exact ties), top1 (test's best is tied with ref's best),
        top1_strict (the same index is best in both), flip (a pair both paths separate by more than
        its band is ordered oppositely), flip_strict (any oppositely ordered pair), constant (every
        ref score is tied with the group's best within their bands), constant_strict (every ref score
        equal).
    """
    test, ref, bands = np.asarray(test, np.float64), np.asarray(ref, np.float64), np.asarray(bands, np.float64)
    i, j = np.triu_indices(len(ref), k=1)
    pair_band = bands[i] + bands[j]  # [pairs]
    d_test, d_ref = test[i] - test[j], ref[i] - ref[j]
    opposite = np.sign(d_test) * np.sign(d_ref) < 0
    resolved = (np.abs(d_test) > pair_band) & (np.abs(d_ref) > pair_band)
    best = int(np.argmax(ref))
    tied_with_best = ref >= ref[best] - (bands + bands[best])  # [n]
    return {
        "kendall_tau": float((np.sign(d_test) * np.sign(d_ref))[resolved].sum() / resolved.sum())
        if resolved.any()
        else math.nan,
        "kendall_tau_strict": kendall_tau_b(test, ref),
        "top1": bool(tied_with_best[int(np.argmax(test))]),
        "top1_strict": int(np.argmax(test)) == best,
        "flip": bool((opposite & resolved).any()),
        "flip_strict": bool(opposite.any()),
        "constant": bool(tied_with_best.all()),
        "constant_strict": bool((ref == ref[best]).all()),
    }


def grpo_advantages_np(scores, group_ids, eps: float = 1e-6, norm_by_std: bool = True) -> np.ndarray:
    """rlrm.engine.algorithms.grpo_advantages (the trainer's own maths) as a float64 numpy array."""
    from rlrm.engine.algorithms import grpo_advantages

    return (
        grpo_advantages(np.asarray(scores, np.float32), list(group_ids), eps=eps, norm_by_std=norm_by_std)
        .double()
        .numpy()
    )


def compare(
    legacy, loop, group_ids, tol: Tolerances = Tolerances(), adv_eps: float = 1e-6, norm_adv_by_std: bool = True
) -> Comparison:
    """Every parity statistic of two score vectors over the same samples.

    Args:
        legacy: [B] scores of the path under test (any float dtype; compared in float64).
        loop: [B] reference scores.
        group_ids: [B] the GRPO group (prompt) of each sample.
        tol: tolerances (the score band and the ranking tie band).
        adv_eps / norm_adv_by_std: as the trainer's `algorithm` section.

    Samples with a non-finite score in either path are left out of every statistic (and listed);
    so are the groups they belong to, from the group and advantage statistics.
    """
    legacy, loop = np.asarray(legacy, np.float64), np.asarray(loop, np.float64)
    groups = np.asarray([str(g) for g in group_ids], dtype=object)
    if not (len(legacy) == len(loop) == len(groups)):
        raise ValueError(f"lengths differ: legacy {len(legacy)}, loop {len(loop)}, group ids {len(groups)}")
    finite = np.isfinite(legacy) & np.isfinite(loop)
    abs_diff, rel_diff = sample_diffs(legacy, loop)
    abs_diff[~finite], rel_diff[~finite] = math.nan, math.nan
    scale = float(np.sqrt(np.mean(loop[finite] ** 2))) if finite.any() else 0.0
    bands = score_bands(loop, tol.atol, tol.rtol, scale)  # [B]
    within = finite & (np.abs(legacy - loop) <= bands)

    bad_groups = set(groups[~finite])
    clean = np.array([g not in bad_groups for g in groups], dtype=bool)
    legacy_adv, loop_adv = np.full(len(loop), math.nan), np.full(len(loop), math.nan)
    if clean.any():
        legacy_adv[clean] = grpo_advantages_np(legacy[clean], groups[clean], adv_eps, norm_adv_by_std)
        loop_adv[clean] = grpo_advantages_np(loop[clean], groups[clean], adv_eps, norm_adv_by_std)

    members: dict[str, list[int]] = {}
    for i in np.flatnonzero(clean):
        members.setdefault(groups[i], []).append(int(i))
    per_group = [group_ranking(legacy[idx], loop[idx], bands[idx]) for idx in members.values()]
    summary = {
        "samples": len(loop),
        "groups": len(set(groups)),
        "score_scale": scale,
        **_diff_stats(abs_diff, rel_diff, finite),
        "outside_tolerance": int((finite & ~within).sum()),
        "nonfinite_legacy": int((~np.isfinite(legacy)).sum()),
        "nonfinite_loop": int((~np.isfinite(loop)).sum()),
        "nonfinite_samples": int((~finite).sum()),
        "pearson": pearson(legacy[finite], loop[finite]),
        "spearman": spearman_tied(legacy[finite], loop[finite], bands[finite]),
        "spearman_strict": spearman(legacy[finite], loop[finite]),
        "group_pearson": group_pearson(legacy[clean], loop[clean], groups[clean]),
        "group_spread_legacy": group_spread(legacy[clean], groups[clean]),
        "group_spread_loop": group_spread(loop[clean], groups[clean]),
        **_group_stats(per_group),
        "groups_with_nonfinite": len(bad_groups),
        **_advantage_stats(legacy_adv, loop_adv, clean),
    }
    return Comparison(abs_diff, rel_diff, within, legacy_adv, loop_adv, summary)


def verdict(summary: dict, tol: Tolerances) -> tuple[bool, list[str]]:
    """(passed, reasons it failed). A non-finite score always fails; so do more samples outside the band
    than `max_outside_frac` allows, and each ranking check of `score_reasons`."""
    reasons = []
    if summary["nonfinite_samples"]:
        reasons.append(
            f"{summary['nonfinite_samples']} samples with a non-finite score "
            f"(legacy {summary['nonfinite_legacy']}, loop {summary['nonfinite_loop']})"
        )
    reasons += score_reasons(summary, tol)
    return not reasons, reasons


def score_reasons(summary: dict, tol: Tolerances, reference: str = "loop", test: str = "legacy") -> list[str]:
    """Why the finite scores fail the tolerances (empty: they pass): samples outside the band, Spearman, rank
    flips, the within-group Pearson correlation. `reference` and `test` name the two sides in the reasons.

    Spearman is undefined (NaN) when every pair of samples is tied within the band: the band then says nothing
    of the ranking, and the within-group correlation, which uses no band, judges it."""
    reasons = []
    allowed = tol.allowed_outside(summary["samples"] - summary["nonfinite_samples"])
    if summary["outside_tolerance"] > allowed:
        reasons.append(
            f"{summary['outside_tolerance']} of {summary['samples']} samples (allowed {allowed}) differ by more than "
            f"atol {tol.atol:g} + rtol {tol.rtol:g} * max(|{reference}|, scale {summary['score_scale']:.3g}) "
            f"(max abs diff {summary['abs_diff_max']:.4g})"
        )
    rho = summary["spearman"]
    if not math.isnan(rho) and rho < tol.min_spearman:
        reasons.append(f"Spearman {rho:.4f} below --min-spearman {tol.min_spearman:g}")
    if summary["rank_flip_groups"] > tol.max_rank_flips:
        reasons.append(f"{summary['rank_flip_groups']} groups flip their ranking (allowed {tol.max_rank_flips})")
    group_reason = group_pearson_reason(summary, tol, reference, test)
    return reasons + ([group_reason] if group_reason else [])


def group_pearson_reason(summary: dict, tol: Tolerances, reference: str = "loop", test: str = "legacy") -> str | None:
    """Why the within-group Pearson correlation fails (None: it passes, or neither side's group deviations exceed
    atol, so there is no ranking to compare). Undefined with a spread on one side fails."""
    spreads = {test: summary["group_spread_legacy"], reference: summary["group_spread_loop"]}
    if max(spreads.values()) <= tol.atol:
        return None
    rho = summary["group_pearson"]
    if math.isnan(rho):
        flat, other = (test, reference) if spreads[test] <= spreads[reference] else (reference, test)
        return (
            f"within-group Pearson undefined: {flat} gives every response of a group the same score, {other} "
            f"does not (RMS deviation from the group means {spreads[other]:.3g}, above atol {tol.atol:g})"
        )
    if rho >= tol.min_group_pearson:
        return None
    judged = summary["groups"] - summary["groups_with_nonfinite"]
    agree = summary["adv_sign_agreement"]
    return (
        f"within-group Pearson {rho:.4f} below --min-group-pearson {tol.min_group_pearson:g}: {test} orders the "
        f"responses of a group otherwise than {reference} (an oppositely ordered pair in "
        f"{summary['rank_flip_groups_strict']} of {judged} groups, GRPO advantage signs equal on "
        f"{100 * agree:.1f}% of samples)"
    )


def _diff_stats(abs_diff: np.ndarray, rel_diff: np.ndarray, finite: np.ndarray) -> dict:
    if not finite.any():
        return {
            k: math.nan for k in ("abs_diff_mean", "abs_diff_p50", "abs_diff_p99", "abs_diff_max", "rel_diff_max")
        } | {"abs_diff_argmax": None}
    a = abs_diff[finite]
    return {
        "abs_diff_mean": float(a.mean()),
        "abs_diff_p50": quantile(a.tolist(), 0.5),
        "abs_diff_p99": quantile(a.tolist(), 0.99),
        "abs_diff_max": float(a.max()),
        "abs_diff_argmax": int(np.flatnonzero(finite)[int(np.argmax(a))]),
        "rel_diff_max": float(rel_diff[finite].max()),
    }


def _group_stats(per_group: list[dict]) -> dict:
    n = len(per_group)
    taus = [g["kendall_tau"] for g in per_group if not math.isnan(g["kendall_tau"])]

    def frac(key: str) -> float:
        return sum(g[key] for g in per_group) / n if n else math.nan

    return {
        "kendall_tau_mean": float(np.mean(taus)) if taus else math.nan,
        "kendall_tau_min": float(np.min(taus)) if taus else math.nan,
        "top1_agreement": frac("top1"),
        "top1_agreement_strict": frac("top1_strict"),
        "rank_flip_groups": sum(g["flip"] for g in per_group),
        "rank_flip_groups_strict": sum(g["flip_strict"] for g in per_group),
        "constant_groups": sum(g["constant"] for g in per_group),
        "constant_groups_strict": sum(g["constant_strict"] for g in per_group),
    }


def _advantage_stats(legacy_adv: np.ndarray, loop_adv: np.ndarray, clean: np.ndarray) -> dict:
    if not clean.any():
        return {"adv_max_abs_diff": math.nan, "adv_mean_abs_diff": math.nan, "adv_sign_agreement": math.nan}
    diff = np.abs(legacy_adv[clean] - loop_adv[clean])
    return {
        "adv_max_abs_diff": float(diff.max()),
        "adv_mean_abs_diff": float(diff.mean()),
        "adv_sign_agreement": float((np.sign(legacy_adv[clean]) == np.sign(loop_adv[clean])).mean()),
    }


def worst_samples(samples, sides: dict[str, np.ndarray], abs_diff: np.ndarray, k: int = 5) -> list[dict]:
    """The k samples furthest apart (non-finite ones first), with each side's score under its name: where to start
    looking."""
    key = np.where(np.isnan(abs_diff), np.inf, abs_diff)
    order = np.argsort(-key, kind="stable")[:k]
    return [
        {
            "sample_id": samples[i].sample_id,
            "group_id": samples[i].group_id,
            **{name: float(scores[i]) for name, scores in sides.items()},
            "abs_diff": float(abs_diff[i]),
        }
        for i in order
    ]
