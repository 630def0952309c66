"""The simulator's tool latency (`tools.*`): k calls of latency L stretch every trajectory's generation by k*L."""

from __future__ import annotations

import numpy as np
import pytest

from rlrm.bench.simulate.draws import draw_workload
from rlrm.bench.simulate.simulation import simulate
from rlrm.bench.simulate.spec import load_spec
from rlrm.errors import ConfigError
from tests.unit.bench.simulate.test_timelines import TWO_SAMPLES


def _run(mode: str, overrides=()):
    spec = load_spec(overrides=[*TWO_SAMPLES, *overrides])
    return simulate(spec, mode, draw_workload(spec))


def _ends(run) -> list[float]:
    return [round(row["perf/wall_s"], 6) for row in run.rows]


@pytest.mark.parametrize("batching", ["static", "continuous"])
def test_sync_step_grows_by_calls_times_latency(batching):
    # sync step without tools: generate 2 + score 3 + old log-probs 0.5 + mini-batch 1 + sync 0.25 = 6.75 s;
    # 3 calls of 0.5 s each add 1.5 s to generation: 8.25 s a step, and gen 2 -> 3.5 s
    base = _run("sync", [f"rollout.batching={batching}"])
    tools = _run("sync", [f"rollout.batching={batching}", "tools.calls_per_sample=3", "tools.latency=fixed:0.5"])
    step = _ends(base)[0]
    assert _ends(tools) == pytest.approx([(step + 1.5) * k for k in (1, 2, 3)])
    assert tools.rows[0]["timing_s/gen"] == pytest.approx(base.rows[0]["timing_s/gen"] + 1.5)


def test_a_call_past_the_timeout_counts_the_timeout_only():
    # 2 calls of 5 s cut at 1 s each: + 2 s a step (6.75 -> 8.75)
    run = _run("sync", ["tools.calls_per_sample=2", "tools.latency=fixed:5", "tools.timeout_s=1"])
    assert _ends(run) == pytest.approx([8.75, 17.5, 26.25])


def test_fully_async_hides_tool_latency_behind_training():
    # the same tool latency costs sync its whole length per step, fully-async less (it overlaps the trainer)
    tools = ["tools.calls_per_sample=2", "tools.latency=fixed:1"]
    added = {m: _ends(_run(m, tools))[-1] - _ends(_run(m))[-1] for m in ("sync", "fully-async")}
    assert added["sync"] == pytest.approx(3 * 2.0)
    assert added["fully-async"] < added["sync"]


def test_baseline_draws_no_tool_latency_and_draws_repeat():
    spec = load_spec(overrides=[*TWO_SAMPLES, "tools.calls_per_sample=4", "tools.latency=uniform:0:2"])
    a, b = draw_workload(spec), draw_workload(spec)
    assert np.array_equal(a.tool_s, b.tool_s) and a.tool_s.shape == (3, 2)
    assert (a.tool_s > 0).all() and (a.tool_s <= 8).all()
    assert not draw_workload(spec, latency=False).tool_s.any()


def test_a_fractional_call_count_is_a_mean():
    # 1.25 calls of 1 s: each sample 1 or 2 calls, a quarter of them 2 (the draws' mean near 1.25 s)
    spec = load_spec(
        overrides=[*TWO_SAMPLES, "workload.steps=2000", "tools.calls_per_sample=1.25", "tools.latency=fixed:1"]
    )
    tool_s = draw_workload(spec).tool_s
    assert set(np.unique(tool_s)) == {1.0, 2.0}
    assert tool_s.mean() == pytest.approx(1.25, abs=0.03)


def test_a_bad_tool_latency_is_one_clear_error():
    with pytest.raises(ConfigError, match="tools.latency.*unknown kind 'fixd'"):
        load_spec(overrides=["tools.latency=fixd:1"])
