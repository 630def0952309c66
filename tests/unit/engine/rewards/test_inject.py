"""reward.inject: the wrapper that adds latency and failures to any reward function, inside the reward loop.

The latency specs it draws from are tested in tests/unit/config/test_latency.py.
"""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from rlrm.config.latency import parse_latency
from rlrm.config.reward import InjectConfig, RewardConfig
from rlrm.engine.rewards.base import RewardResult, RewardSample
from rlrm.engine.rewards.errors import InjectedFailure
from rlrm.engine.rewards.factory import build_reward_fn
from rlrm.engine.rewards.inject import inject
from rlrm.engine.rewards.loop import RewardLoop


def sample(i=0, uid=None):
    return RewardSample(
        uid=uid or f"p{i // 4}",
        index=i,
        data_source="t",
        prompt=[{"role": "user", "content": "Q?"}],
        solution_str="#### 3",
        ground_truth="3",
    )


async def one(s):
    return RewardResult(1.0, {"acc": 1.0})


# ---- the wrapper


def run(coro):
    return asyncio.run(coro)


def test_draws_depend_on_seed_sample_and_attempt_not_on_order():
    cfg = InjectConfig(latency="uniform:1:40", scale=1e-4, seed=3)
    batch = [sample(i) for i in range(8)]

    async def latencies(order):
        fn = inject(one, cfg)
        results = {s.index: await fn(s) for s in order}
        return [results[i].extra["injected_latency_s"] for i in range(8)]

    forward, backward = run(latencies(batch)), run(latencies(batch[::-1]))
    assert forward == backward and len(set(forward)) == 8
    dist = parse_latency("uniform:1:40").scaled(1e-4)
    assert forward[5] == dist.sample(random.Random("3:p1:5:0"))  # the documented seed string

    async def two_attempts():
        fn = inject(one, cfg)
        return [(await fn(sample(0))).extra["injected_latency_s"] for _ in range(2)]

    first, second = run(two_attempts())
    assert first == forward[0] and second != first
    other_seed = run(inject(one, cfg.model_copy(update={"seed": 4}))(sample(0))).extra["injected_latency_s"]
    assert other_seed != first


def test_wrapper_does_not_block_the_event_loop():
    cfg = RewardConfig(inject={"latency": "fixed:0.05"}, num_workers=2, attempt_timeout_s=5)
    fn = build_reward_fn(cfg)
    assert fn.__name__ == "injected(rule_reward)"
    loop = RewardLoop(fn, cfg)
    start = time.perf_counter()
    results = run(loop.score_all([sample(i) for i in range(50)]))
    elapsed = time.perf_counter() - start
    assert elapsed >= 0.05 and elapsed < 10 * 0.05  # 50 sequential sleeps would take 50x
    assert all(r.score == 1.0 and r.extra["injected_latency_s"] == 0.05 for r in results)
    assert loop.take_metrics()["reward/injected_latency_mean"] == pytest.approx(0.05)


def test_results_of_every_shape_get_the_latency():
    cfg = InjectConfig(latency="fixed:0.001")

    async def as_dict(s):
        return {"score": 0.5, "why": "half"}

    async def as_float(s):
        return 0.25

    assert run(inject(as_dict, cfg)(sample())) == {"score": 0.5, "why": "half", "injected_latency_s": 0.001}
    assert run(inject(as_float, cfg)(sample())) == RewardResult(0.25, {"injected_latency_s": 0.001})
    assert inject(as_float, cfg).__name__ == "injected(as_float)"


def test_inactive_section_leaves_the_function_alone():
    for inject_cfg in ({}, {"latency": "0"}, {"latency": "fixed:0"}, {"latency": "fixed:1", "scale": 0}):
        cfg = RewardConfig(inject=inject_cfg)
        assert not cfg.inject.active and build_reward_fn(cfg).__name__ == "rule_reward"
    assert RewardConfig(inject={"fail_rate": 0.1}).inject.active


def test_every_attempt_failing_defaults_and_is_counted():
    assert InjectedFailure.retryable and InjectedFailure.kind == "injected"
    cfg = RewardConfig(
        inject={"fail_rate": 1.0}, max_retries=2, backoff_s=0.0, on_failure="default", default_score=-1.0
    )
    loop = RewardLoop(build_reward_fn(cfg), cfg)
    results = run(loop.score_all([sample(i) for i in range(8)]))
    assert all(r.score == -1.0 and "injected failure" in r.extra["reward_error"] for r in results)
    m = loop.take_metrics()
    assert m["reward/injected_failures"] == 8 * (2 + 1) and m["reward/retries"] == 8 * 2
    assert m["reward/defaulted"] == 8 and m["reward/failures"] == 8
    assert m["reward/injected_latency_mean"] == 0.0  # no result scored


def test_some_failures_are_mostly_recovered_by_retries():
    n = 200
    cfg = RewardConfig(inject={"fail_rate": 0.3, "seed": 1}, max_retries=3, backoff_s=0.0, on_failure="default")
    loop = RewardLoop(build_reward_fn(cfg), cfg)
    results = run(loop.score_all([sample(i) for i in range(n)]))
    m = loop.take_metrics()
    defaulted = sum("reward_failed" in r.extra for r in results)
    assert m["reward/defaulted"] == defaulted <= 6  # all four attempts fail with probability 0.3^4 = 0.8%
    assert all(r.score == 1.0 for r in results if "reward_failed" not in r.extra)
    attempts = n + m["reward/retries"]
    # every failed attempt is retried except the last one of a defaulted sample
    assert m["reward/injected_failures"] == m["reward/retries"] + defaulted
    assert m["reward/injected_failures"] / attempts == pytest.approx(0.3, abs=0.06)
