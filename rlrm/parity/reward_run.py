"""One `rlrm parity reward` run: the same samples scored through two reward contracts, compared as
`rlrm parity disrm` compares its two DisRM paths.

    result = run_reward_parity(a, b, samples, tol, adv_eps=1e-6, norm_adv_by_std=True, max_failed_frac=0.0)
    result.passed, result.reasons, result.summary

Side A is the reference (the band of rlrm.parity.compare is taken around A's scores), side B the setup under
test: another judge template or model folder, a hosted judge, another dtype, another profile's reward. The sides
are scored one after the other, so on a GPU the two never hold a reward model at the same time.

The verdict: every sample B gives a score must sit within the band of A's (up to --max-outside-frac of them
may not), Spearman at least --min-spearman, at most --max-rank-flips groups ranked the other way, the Pearson
correlation of the scores after removing each group's mean at least --min-group-pearson (this one uses no band,
so an offset that widens the band cannot hide a reordered group); and each side may fail to score at most
--max-failed-frac of the samples (a failed sample is left out of every statistic and counted, never scored 0).
Identical contracts on both sides are not an error: the run then measures the reward's own noise (a judge
sampling at temperature > 0, batching), and says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from rlrm.parity.agreement import verdict_agreement
from rlrm.parity.compare import Comparison, Tolerances, compare, score_reasons, worst_samples
from rlrm.parity.contract_diff import contract_diff, setting_changes
from rlrm.parity.inputs import ParitySample
from rlrm.parity.reward_sides import RewardSide, SideScores, check_references, score_side

SAME_CONTRACT_NOTE = (
    "both sides have the same reward contract: the differences measured are the reward's own noise "
    "(a judge sampling at temperature > 0, batching), a baseline for comparing two contracts"
)


@dataclass
class RewardParity:
    a: SideScores
    b: SideScores
    comparison: Comparison  # B against A (A is the reference)
    passed: bool
    reasons: list[str]
    summary: dict


def run_reward_parity(
    a: RewardSide,
    b: RewardSide,
    samples: list[ParitySample],
    tol: Tolerances,
    adv_eps: float = 1e-6,
    norm_adv_by_std: bool = True,
    max_failed_frac: float = 0.0,
    log: Callable[[str], None] = lambda _: None,
) -> RewardParity:
    """Score `samples` with side A, then side B; compare and judge (see the module docstring)."""
    for side in (a, b):
        check_references(side, samples)
    scored = {}
    for side in (a, b):
        log(f"{side.label}: scoring {len(samples)} samples")
        scored[side.name] = score_side(side, samples)
    sa, sb = scored["A"], scored["B"]
    cmp = compare(sb.scores, sa.scores, [s.group_id for s in samples], tol, adv_eps, norm_adv_by_std)
    reasons = failure_reasons({"A": sa, "B": sb}, len(samples), max_failed_frac)
    reasons += score_reasons(cmp.summary, tol, reference="A", test="B")
    diff = contract_diff(sa.contract, sb.contract)
    summary = {
        "verdict": "fail" if reasons else "pass",
        "reasons": reasons,
        "samples": len(samples),
        "groups": cmp.summary["groups"],
        "notes": [SAME_CONTRACT_NOTE] if diff["same"] else [],
        "differs": {"settings": setting_changes(a.reward, b.reward), "contract": diff},
        "a": _side_summary(a, sa, samples),
        "b": _side_summary(b, sb, samples),
        "agreement": verdict_agreement(sa.scores, sb.scores),
        "tolerances": {**tol.as_dict(), "max_failed_frac": max_failed_frac},
        "stats": _stats(cmp.summary, samples),
        "worst": worst_samples(samples, {"a": sa.scores, "b": sb.scores}, cmp.abs_diff),
    }
    return RewardParity(sa, sb, cmp, not reasons, reasons, summary)


def failure_reasons(sides: dict[str, SideScores], samples: int, max_failed_frac: float) -> list[str]:
    """A reason per side that failed more samples than `max_failed_frac` allows (rounded down: none of a few)."""
    allowed = math.floor(max_failed_frac * samples + 1e-9)
    return [
        f"side {name} could not score {s.failures} of {samples} samples (allowed {allowed}; "
        f"first error: {next(iter(s.errors.values()))})"
        for name, s in sides.items()
        if s.failures > allowed
    ]


def _side_summary(side: RewardSide, s: SideScores, samples: list[ParitySample]) -> dict:
    return {
        "origin": side.origin,
        "kind": side.reward.kind,
        "model": s.model,
        "contract": s.contract.as_json(),
        "seconds": s.seconds,
        "samples_per_s": len(samples) / s.seconds if s.seconds > 0 else math.inf,
        "failures": s.failures,
        "failed": [{"sample_id": samples[i].sample_id, "error": e} for i, e in sorted(s.errors.items())],
        "judge": s.judge,
        "reward_config": side.reward.model_dump(mode="json"),  # names of key variables only, never their values
    }


def _stats(stats: dict, samples: list[ParitySample]) -> dict:
    """compare()'s summary with B/A names for its legacy/loop ones, and the worst sample by id."""
    renamed = {
        "nonfinite_legacy": "nonfinite_b",
        "nonfinite_loop": "nonfinite_a",
        "group_spread_legacy": "group_spread_b",
        "group_spread_loop": "group_spread_a",
    }
    out = {renamed.get(k, k): v for k, v in stats.items() if k not in ("samples", "groups")}
    argmax = out.get("abs_diff_argmax")
    out["abs_diff_argmax"] = samples[argmax].sample_id if argmax is not None else None
    return out
