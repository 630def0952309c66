"""The reward function a `reward` section names, built from its parts (used in-process and in Ray workers)."""

from __future__ import annotations

from typing import cast

from rlrm.call_errors import CallError
from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import ClosableRewardFn, RewardFn, RewardResult, RewardSample
from rlrm.engine.rewards.custom import make_custom_reward
from rlrm.engine.rewards.disrm import load_disrm_tokenizer, make_disrm_reward
from rlrm.engine.rewards.genrm import make_genrm_reward
from rlrm.engine.rewards.inject import inject
from rlrm.engine.rewards.ledger import ledger_scope
from rlrm.engine.rewards.metered import MeteredBalancer
from rlrm.engine.rewards.rubric import make_rubric_reward
from rlrm.engine.rewards.rule import make_rule_reward


def build_reward_fn(
    cfg: RewardConfig, balancer=None, model_path: str | None = None, limiter=None, disrm_tokenizer=None
) -> ClosableRewardFn:
    """The section's reward function, wrapped with `reward.inject` when that injects anything.

    Model calls go through `balancer` under `limiter` (a RateLimiter, its Ray actor's client, or None) and are
    counted per sample (rlrm/engine/rewards/metered.py, ledger.py). Its `close()` stops what the function
    started (a custom function's worker processes); it does nothing for the others. `disrm_tokenizer`: a DisRM's
    tokenizer other than its folder's (parity's --template), conversations then cut at reward.disrm.max_length.
    """
    metered = MeteredBalancer(balancer, cfg, limiter) if balancer is not None else None
    base = _base_reward_fn(cfg, metered, model_path, disrm_tokenizer)
    fn = cast(ClosableRewardFn, with_injection(with_ledger(base), cfg))
    fn.close = getattr(base, "close", _nothing)
    return fn


def _nothing() -> None:
    """A reward function's close() when it started nothing."""


def with_ledger(fn: RewardFn) -> RewardFn:
    """`fn` with one call ledger per sample, whose counts join the result's (or the failure's) extra info."""

    async def counted_reward(sample: RewardSample):
        with ledger_scope(reuse=True) as ledger:
            try:
                raw = await fn(sample)
            except CallError as exc:
                exc.extra = {**exc.extra, **ledger.as_extra()}
                raise
        counts = ledger.as_extra()
        if not counts:
            return raw
        if isinstance(raw, RewardResult):
            raw.extra.update(counts)
            return raw
        if isinstance(raw, dict):
            return {**raw, **counts}
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return RewardResult(raw, counts)
        return raw  # not a reward: the loop says so

    counted_reward.__name__ = getattr(fn, "__name__", "reward")
    return counted_reward


def with_injection(fn: RewardFn, cfg: RewardConfig) -> RewardFn:
    """`fn` wrapped with `reward.inject` when that injects anything."""
    if not cfg.inject.active:
        return fn

    return inject(fn, cfg.inject)


def _base_reward_fn(cfg: RewardConfig, balancer, model_path: str | None, disrm_tokenizer=None) -> RewardFn:
    """Rule, custom, DisRM, GenRM, rubric or composite; model kinds call the servers behind `balancer`."""
    kind = cfg.model_kind
    if cfg.kind == "custom":
        return make_custom_reward(cfg, balancer, model_path)
    if kind is None:
        return make_rule_reward(cfg)
    if cfg.kind == "rubric":
        return make_rubric_reward(cfg, balancer)
    if kind == "disrm":
        if disrm_tokenizer is None:
            disrm_tokenizer, limit = load_disrm_tokenizer(cfg, model_path)
        else:  # parity's --template: cut at reward.disrm.max_length, which parity set from the model already
            limit = None
        model_fn = make_disrm_reward(cfg, balancer, disrm_tokenizer, limit)
    else:
        model_fn = make_genrm_reward(cfg, balancer)
    if cfg.kind != "composite":
        return model_fn
    return make_composite_reward(cfg, make_rule_reward(cfg), model_fn)


def make_composite_reward(cfg: RewardConfig, rule_fn: RewardFn, model_fn: RewardFn) -> RewardFn:
    """Rule and model together: a weighted sum, or the rule as a gate (the model only sees right answers)."""
    comp = cfg.composite

    async def composite_reward(sample: RewardSample) -> RewardResult:
        rule = await rule_fn(sample)
        if comp.mode == "gate" and rule.score < cfg.score:
            return RewardResult(rule.score, {**rule.extra, "gated": True})
        model = await model_fn(sample)
        if comp.mode == "gate":
            return RewardResult(model.score, {**rule.extra, **model.extra, "gated": False})
        score = comp.rule_weight * rule.score + comp.model_weight * model.score
        return RewardResult(score, {**rule.extra, **model.extra, "rule_score": rule.score, "model_score": model.score})

    return composite_reward
