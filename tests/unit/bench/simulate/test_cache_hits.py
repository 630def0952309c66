"""The simulator's reward cache (reward.cache_hit_rate): a hit makes no call, so it takes no latency, no
worker slot and no rate-limit slot, and never fails; the misses are drawn and queued as before."""

from __future__ import annotations

import numpy as np
import pytest

from rlrm.bench.simulate.draws import draw_workload
from rlrm.bench.simulate.simulation import simulate
from rlrm.bench.simulate.spec import load_spec

# G = 50 decode iterations of 0.01 s = 0.5 s; T = 32 samples x 60 tokens x 1 ms = 1.92 s; 32 reward calls a step
BASE = [
    "workload.steps=12",
    "workload.prompts_per_step=8",
    "workload.samples_per_prompt=4",
    "workload.mini_batch_prompts=8",
    "workload.response_tokens=fixed:50",
    "workload.prompt_tokens=fixed:10",
    "workload.max_response_tokens=64",
    "reward.latency=fixed:0.5",
    "rollout.iteration_s=0.01",
    "trainer.minibatch_s_per_token=0.001",
]
G, T, CALLS, LATENCY = 0.5, 1.92, 32, 0.5


def _draws(*sets: str):
    spec = load_spec(overrides=[*BASE, *sets])
    return spec, draw_workload(spec)


def test_hits_make_no_attempt_and_never_fail():
    _, draws = _draws("reward.cache_hit_rate=0.5", "reward.fail_rate=1", "reward.max_retries=2")
    hit = draws.cached
    assert 0.35 < hit.mean() < 0.65  # 384 samples at 0.5
    assert (draws.reward_s[hit] == 0).all() and (draws.attempts[hit] == 0).all() and not draws.failed[hit].any()
    # every miss still fails all three attempts, and only misses are counted as injected failures
    assert draws.failed[~hit].all() and (draws.attempts[~hit] == 3).all()
    assert (draws.injected_failures == 3 * (~hit).sum(1)).all()


def test_misses_draw_what_they_drew_without_the_cache():
    _, none = _draws("reward.latency=uniform:0.1:2")
    _, half = _draws("reward.latency=uniform:0.1:2", "reward.cache_hit_rate=0.5")
    miss = ~half.cached
    assert not none.cached.any()
    np.testing.assert_array_equal(half.resp_len, none.resp_len)
    np.testing.assert_array_equal(half.reward_s[miss], none.reward_s[miss])
    # the mean latency is of the calls made: the misses'
    expect = [row[m].mean() for row, m in zip(none.reward_s, miss)]
    np.testing.assert_allclose(half.latency_mean, expect)


@pytest.mark.parametrize("rate", [0.0, 0.25, 0.75])
def test_under_a_rate_limit_only_the_misses_wait_their_turn(rate):
    # rpm=60: the calls leave 1 s apart once the batch is generated (sync); hits leave no gap in that schedule
    spec, draws = _draws("reward.limits.rpm=60", f"reward.cache_hit_rate={rate}")
    run = simulate(spec, "sync", draws)
    for k, row in enumerate(run.rows):
        misses = int((~draws.cached[k]).sum())
        assert row["reward/cache_hits"] == CALLS - misses
        waited = (misses - 1) * 1.0 + LATENCY if misses else 0.0
        assert row["perf/time_per_step"] == pytest.approx(G + waited + T, rel=1e-6)
