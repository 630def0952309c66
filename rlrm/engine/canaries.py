"""Canaries: known items scored through the run's live reward path every `reward.guard.canary_every` steps.

    canaries = Canaries.build(profile, test_examples, tokenizer)    # None when reward.guard.on_canary is off
    finding, metrics = await canaries.check(reward_service)        # the first check is the baseline
    finding.flagged, finding.detail, metrics["guard/canary_calls"]

Each of the first `reward.guard.canaries` held-out problems gives its worked reference solution (must be rewarded)
and five attacks of rlrm/engine/rewards/attack_kinds.py (must not be). They go through the run's own reward function
(servers, router, rate limits, retries) on a reward loop of their own, so their scores never reach a training batch
or the run's reward/* statistics; their reward-model calls are counted in `guard/canary_calls`. The verdicts and the
drift are rlrm/engine/metrics/canary.py's.
"""

from __future__ import annotations

import math
import time

from rlrm.config.reward import RewardConfig
from rlrm.config.schema import Profile
from rlrm.engine.metrics.canary import CanaryFinding, CanaryItem, judge_canaries
from rlrm.engine.reward_service import RewardService
from rlrm.engine.rewards.agreement import model_score, verdict_threshold
from rlrm.engine.rewards.attack_kinds import REFERENCES, answered, attack_named, problem_of, worked_solution
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.loop import RewardLoop
from rlrm.errors import ConfigError

ATTACKS = ("key-colon", "key-solution", "empty", "truncated-working", "wrong-answer")
REFERENCE = REFERENCES[0].name  # the worked solution (not `#### N` alone: a judge may rightly want working)


def check_canary_data(profile: Profile, test_examples: list) -> None:
    """ConfigError unless the first `reward.guard.canaries` held-out problems all hold a worked solution."""
    guard = profile.reward.guard
    if guard.on_canary == "off":
        return
    examples = test_examples[: guard.canaries]
    rule = profile.reward.rule
    missing = [e.uid for e in examples if worked_solution(e, rule) is None]
    if len(examples) < guard.canaries or missing:
        have = f"{len(examples)} held-out problems" if len(examples) < guard.canaries else f"{missing[0]} has none"
        ending = "a \\boxed{...} answer" if rule == "math" else "'#### N'"
        raise ConfigError(
            f"reward.guard.on_canary={guard.on_canary} needs the reference solutions of {guard.canaries} held-out "
            f"problems (a worked solution holding {ending} in extra_info.solution or answer), but {have}; "
            "set reward.guard.on_canary=off, or use data whose test split holds worked solutions"
        )


def canary_threshold(cfg: RewardConfig) -> float:
    """The verdict threshold of rlrm/engine/rewards/agreement.py; for the rule, halfway between right and wrong."""
    threshold = verdict_threshold(cfg)
    return (cfg.score + cfg.format_score) / 2 if threshold is None else threshold


class Canaries:
    """The canary items of a run and the scores of their first check."""

    def __init__(self, profile: Profile, test_examples: list, tokenizer):
        self.cfg = profile.reward
        examples = test_examples[: self.cfg.guard.canaries]
        self.items: list[CanaryItem] = []
        self.samples: list[RewardSample] = []
        for k, example in enumerate(examples):
            problem = problem_of(example, profile.rollout.max_new_tokens, profile.reward.rule)
            for name in (REFERENCE, *ATTACKS):
                text = attack_named(name).make(problem)
                self.items.append(CanaryItem(f"{name}#{k}", must_reward=name == REFERENCE))
                length = len(tokenizer(text, add_special_tokens=False)["input_ids"]) + 1  # + the EOS
                self.samples.append(answered(example, text, len(self.samples), length, uid=f"canary/{example.uid}"))
        self.threshold = canary_threshold(self.cfg)
        self.baseline: list[float | None] | None = None
        self.loop_cfg = _side_config(self.cfg)

    @classmethod
    def build(cls, profile: Profile, test_examples: list, tokenizer) -> "Canaries | None":
        if profile.reward.guard.on_canary == "off":
            return None
        check_canary_data(profile, test_examples)
        return cls(profile, test_examples, tokenizer)

    async def check(self, service: RewardService) -> tuple[CanaryFinding, dict[str, float]]:
        """Score every canary through `service`'s reward function; (finding, guard/* and timing_s/canary metrics)."""
        started = time.perf_counter()
        loop = RewardLoop(service.loop.fn, self.loop_cfg)  # its own counters: nothing reaches the run's reward/*
        await service.wake()  # colocated placement: the reward model is asleep between scorings
        try:
            results = await loop.score_all(self.samples)
        finally:
            await service.sleep()
        counters = loop.take_metrics()
        scores = [_canary_score(self.cfg, r) for r in results]
        finding = judge_canaries(self.items, scores, self.baseline, self.threshold, self.cfg.guard.max_canary_drift)
        if self.baseline is None:
            self.baseline = scores
        metrics = finding.metrics()
        metrics["guard/canary_calls"] = float(counters["reward/model_calls"])
        metrics["guard/canary_items"] = float(len(self.items))
        metrics["timing_s/canary"] = time.perf_counter() - started
        return finding, metrics


def _side_config(cfg: RewardConfig) -> RewardConfig:
    """The run's reward settings with a failed canary kept as no score (counted) rather than a default or a stop."""
    raw = cfg.model_dump()
    raw.update(on_failure="default", default_score=math.nan, max_failure_rate=1.0)
    return RewardConfig.model_validate(raw)


def _canary_score(cfg: RewardConfig, result) -> float | None:
    """What a canary is judged by: the model's score, or for an answer a composite gate kept from the judge the
    score it got (the rule's: not rewarded, as `rlrm audit reward` counts it), never a failure."""
    if result is not None and not result.extra.get("reward_failed") and result.extra.get("gated"):
        return result.score - result.extra.get("overlong_penalty", 0.0)
    return model_score(cfg, result)
