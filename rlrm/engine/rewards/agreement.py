"""Does the trained reward agree with the truth? Per-step audit numbers of the reward, from the step's samples.

    agreement_metrics(profile.reward, [(sample, result), ...])
    # {"reward/rule_agreement": 0.875, "reward/rule_agreement_samples": 256, "reward/top1pct_share": 0.04}

- `reward/rule_agreement`: the share of samples on which the model reward's verdict (its score
  thresholded: score >= threshold means "correct") equals the rule's verdict (`reward.rule`: the
  answer matches the ground truth) on the same sample. Validation always uses the rule, so a reward that drifts away from the
  truth shows up here every step, long before `val/accuracy` is measured again. Samples without a
  ground truth, whose reward failed (`on_failure: default`) or that a composite `gate` kept from the
  model are left out; `reward/rule_agreement_samples` counts the samples it is over. With
  `reward.kind: rule` the reward *is* the rule: the metric would be 1 by construction, so it is not
  written at all (absent, rather than a flat line that says nothing).
- `reward/top1pct_share`: the share of the step's reward mass (score minus the step's lowest score,
  so any scale or offset reads the same) that the top 1% of its samples (at least one) hold. Near 1
  when a few samples collect almost all of the reward (a reward model extrapolating wildly on a few
  odd responses). Absent when fewer than 5 times that many samples scored above the lowest score:
  a sparse reward (few right answers) is not a concentrated one, and with at least 5k rewarded
  samples a binary reward gives at most 1/5. Measured: 0.05-0.10 (tiny-genrm, 40 steps), 0.04-0.06
  (tiny-disrm, 20 steps); the report flags a median over 0.5.

- `reward/component/<name>/rule_agreement`: the same share for each named reward component
  (rlrm/engine/rewards/components.py): the component's verdict (value >= `reward.agreement_threshold`, 0.5
  when unset) against the rule's, so a component that drifts from the truth while the others hold is seen.
  Written for the rule's own components too (`format` against `correct` says how often a found answer is right).

The verdict threshold is `reward.agreement_threshold`, or by kind when that is unset: 0 for a DisRM
(its raw logit: sigmoid 0.5, where a Bradley-Terry or BCE-trained classifier is undecided), 0.5 for
a GenRM (its score is the verdict divided by `max_score`, so half marks), and 0.5 for a custom
function (the rule's own scale: 1 correct, 0 not). A composite reward is judged by its model part.
"""

from __future__ import annotations

import math

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.answers import check_answer
from rlrm.engine.rewards.components import COMPONENTS_KEY

DEFAULT_THRESHOLDS = {"disrm": 0.0, "genrm": 0.5, "custom": 0.5}
TOP_FRACTION = 0.01
MIN_REWARDED_PER_TOP = 5  # samples above the lowest score needed per top sample


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
    unshaped = result.score - result.extra.get("overlong_penalty", 0.0)  # the verdict, before reward.overlong
    if cfg.kind != "composite":
        return unshaped
    if cfg.composite.mode == "gate":
        return None if result.extra.get("gated", True) else unshaped
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
        truth = check_answer(cfg, sample.solution_str, sample.ground_truth)[1]
        agree += (score >= threshold) == truth
        compared += 1
    return (agree / compared, compared) if compared else None


def top_share(
    scores: list[float], fraction: float = TOP_FRACTION, min_ratio: int = MIN_REWARDED_PER_TOP
) -> float | None:
    """Share of the reward mass above the step's minimum held by the top `fraction` of the samples (at least one).

    Example: 100 samples, 90 scored 0, 8 scored 1, 2 scored 11 (fraction 0.01 -> the top 1 sample):
    mass 8 + 22 = 30, top 11 / 30 = 0.367. None when fewer than `min_ratio` x (top count) samples
    score above the minimum (here 10 >= 5).
    """
    finite = [s for s in scores if math.isfinite(s)]
    if not finite:
        return None
    low = min(finite)
    mass = sorted((s - low for s in finite), reverse=True)
    top = max(1, math.ceil(fraction * len(mass)))
    if sum(m > 0 for m in mass) < min_ratio * top:
        return None
    return sum(mass[:top]) / sum(mass)


def component_agreement(cfg: RewardConfig, pairs) -> dict[str, float]:
    """reward/component/<name>/rule_agreement over (RewardSample, RewardResult | None) pairs with components."""
    threshold = DEFAULT_THRESHOLDS["custom"] if cfg.agreement_threshold is None else cfg.agreement_threshold
    counts: dict[str, list[int]] = {}  # name -> [agreeing, compared]
    for sample, result in pairs:
        if result is None or result.extra.get("reward_failed") or not sample.ground_truth:
            continue
        components = result.extra.get(COMPONENTS_KEY)
        if not components:
            continue
        truth = check_answer(cfg, sample.solution_str, sample.ground_truth)[1]
        for name, value in components.items():
            seen = counts.setdefault(name, [0, 0])
            seen[0] += (value >= threshold) == truth
            seen[1] += 1
    return {f"reward/component/{name}/rule_agreement": agree / compared for name, (agree, compared) in counts.items()}


def agreement_metrics(cfg: RewardConfig, pairs) -> dict[str, float]:
    """reward/rule_agreement(_samples), reward/top1pct_share and each component's rule agreement of a step's samples."""
    pairs = list(pairs)
    out: dict[str, float] = component_agreement(cfg, pairs)
    agreement = rule_agreement(cfg, pairs)
    if agreement is not None:
        out["reward/rule_agreement"], out["reward/rule_agreement_samples"] = agreement
    share = top_share([r.score for _, r in pairs if r is not None and not r.extra.get("reward_failed")])
    if share is not None:
        out["reward/top1pct_share"] = share
    return out


def _judged_by(cfg: RewardConfig) -> str | None:
    """Which kind of reward gives the verdict compared with the rule (None: the rule itself)."""
    if cfg.kind == "rule":
        return None
    if cfg.kind == "custom":
        return "custom"
    return cfg.model_kind
