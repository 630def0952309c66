"""Does the trained reward agree with the truth? Per-step audit numbers of the reward, from the step's samples.

    agreement_metrics(profile.reward, [(sample, result), ...])
    # {"reward/rule_agreement": 0.875, "reward/rule_agreement_samples": 256, "reward/top10_share": 0.12}

- `reward/rule_agreement`: the share of samples on which the model reward's verdict (its score
  thresholded: score >= threshold means "correct") equals the GSM8K rule's verdict (exact answer
  match) on the same sample. Validation always uses the rule, so a reward that drifts away from the
  truth shows up here every step, long before `val/accuracy` is measured again. Samples without a
  ground truth, whose reward failed (`on_failure: default`) or that a composite `gate` kept from the
  model are left out; `reward/rule_agreement_samples` counts the samples it is over. With
  `reward.kind: rule` the reward *is* the rule: the metric would be 1 by construction, so it is not
  written at all (absent, rather than a flat line that says nothing).
- `reward/top10_share`: among the samples scored above the step's lowest score, the share of the
  reward mass (score minus that minimum, so any scale or offset reads the same) that the top 10% of
  them hold. A binary reward gives 0.1 (every rewarded sample got the same); near 1 when a few
  samples collect almost all of it. Absent with fewer than 10 such samples.

The verdict threshold is `reward.agreement_threshold`, or by kind when that is unset: 0 for a DisRM
(its raw logit: sigmoid 0.5, where a Bradley-Terry or BCE-trained classifier is undecided), 0.5 for
a GenRM (its score is the verdict divided by `max_score`, so half marks), and 0.5 for a custom
function (the rule's own scale: 1 correct, 0 not). A composite reward is judged by its model part.
"""

from __future__ import annotations

import math

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards import gsm8k

DEFAULT_THRESHOLDS = {"disrm": 0.0, "genrm": 0.5, "custom": 0.5}
TOP_FRACTION = 0.1
MIN_TOP_SAMPLES = 10  # fewer rewarded samples than this: the top 10% would be one sample or none


def verdict_threshold(cfg: RewardConfig) -> float | None:
    """The score at and above which the trained reward says "correct"; None for the rule itself."""
    judged_by = _judged_by(cfg)
    if judged_by is None:
        return None
    if cfg.agreement_threshold is not None:
        return cfg.agreement_threshold
    return DEFAULT_THRESHOLDS[judged_by]


def model_score(cfg: RewardConfig, result) -> float | None:
    """The part of a result the verdict is read from; None when the model did not judge the sample."""
    if result is None or result.extra.get("reward_failed"):
        return None
    if cfg.kind != "composite":
        return result.score
    if cfg.composite.mode == "gate":
        return None if result.extra.get("gated", True) else result.score
    value = result.extra.get("model_score")
    return None if value is None else float(value)


def rule_agreement(cfg: RewardConfig, pairs) -> tuple[float, int] | None:
    """(share of agreeing verdicts, samples compared) over (RewardSample, RewardResult | None) pairs.

    None when the reward is the rule or no sample could be compared.
    """
    threshold = verdict_threshold(cfg)
    if threshold is None:
        return None
    agree = compared = 0
    for sample, result in pairs:
        score = model_score(cfg, result)
        if score is None or not sample.ground_truth:
            continue
        truth = gsm8k.extract_solution(sample.solution_str, method=cfg.method) == sample.ground_truth
        agree += (score >= threshold) == truth
        compared += 1
    return (agree / compared, compared) if compared else None


def top_share(scores: list[float], fraction: float = TOP_FRACTION, min_samples: int = MIN_TOP_SAMPLES) -> float | None:
    """Share of the reward mass above the minimum held by the top `fraction` of the samples above it.

    Example: scores [0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1] (ten rewarded equally), fraction 0.1 -> the
    top 1 of 10 holds 1/10 = 0.1. None with fewer than `min_samples` samples above the minimum.
    """
    finite = [s for s in scores if math.isfinite(s)]
    if not finite:
        return None
    low = min(finite)
    mass = sorted((s - low for s in finite if s > low), reverse=True)
    if len(mass) < min_samples:
        return None
    top = max(1, math.ceil(fraction * len(mass)))
    return sum(mass[:top]) / sum(mass)


def agreement_metrics(cfg: RewardConfig, pairs) -> dict[str, float]:
    """reward/rule_agreement, reward/rule_agreement_samples and reward/top10_share of a step's samples."""
    pairs = list(pairs)
    out: dict[str, float] = {}
    agreement = rule_agreement(cfg, pairs)
    if agreement is not None:
        out["reward/rule_agreement"], out["reward/rule_agreement_samples"] = agreement
    share = top_share([r.score for _, r in pairs if r is not None and not r.extra.get("reward_failed")])
    if share is not None:
        out["reward/top10_share"] = share
    return out


def _judged_by(cfg: RewardConfig) -> str | None:
    """Which kind of reward gives the verdict compared with the rule (None: the rule itself)."""
    if cfg.kind == "rule":
        return None
    if cfg.kind == "custom":
        return "custom"
    return cfg.model_kind
