"""Replaying a benchmark's own reward latencies: read from its traces, fed to the simulator."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlrm.bench.simulate.draws import draw_workload
from rlrm.bench.simulate.replay import injected_latencies
from rlrm.bench.simulate.simulation import simulate
from rlrm.bench.simulate.spec import load_spec


def _trace(path, spans):
    events = [
        {
            "name": "reward",
            "cat": "reward",
            "ph": "X",
            "pid": 0,
            "tid": 1,
            "ts": ts * 1e6,
            "dur": dur * 1e6,
            "args": args,
        }
        for ts, dur, args in spans
    ]
    events.append({"name": "reward", "cat": "reward_wait", "ph": "X", "pid": 0, "tid": 2, "ts": 0, "dur": 9e6})
    (path / "trace.json").write_text(json.dumps({"traceEvents": events}))


def test_latencies_come_back_per_step_and_sample_and_a_timed_out_first_attempt_is_kept(tmp_path):
    _trace(
        tmp_path,
        [
            (0.0, 0.31, {"batch": 1, "sample": 0, "injected_latency_s": 0.3}),
            (0.0, 0.12, {"batch": 1, "sample": 1, "injected_latency_s": 0.1}),
            # cut at the 5-s timeout, then retried with a 0.2-s latency: the span covers both, names the last
            (0.0, 5.4, {"batch": 2, "sample": 0, "injected_latency_s": 0.2}),
            (1.0, 0.05, {"batch": 2, "sample": 1, "injected_latency_s": 0.04}),
        ],
    )
    got = injected_latencies(tmp_path, steps=2, width=2, timeout_s=5.0)
    assert got == pytest.approx(np.array([[0.3, 0.1], [5.4, 0.04]]))
    assert injected_latencies(tmp_path, steps=2, width=3, timeout_s=5.0) is None  # a sample with no record
    assert injected_latencies(tmp_path / "nowhere", steps=2, width=2, timeout_s=5.0) is None


def test_replayed_latencies_drive_the_simulated_reward_times():
    spec = load_spec(
        overrides=[
            "workload.steps=2",
            "workload.prompts_per_step=2",
            "workload.samples_per_prompt=2",
            "workload.mini_batch_prompts=2",
            "reward.latency=uniform:0.1:1",
            "reward.timeout_s=5",
            "reward.max_retries=1",
        ]
    )
    first = np.array([[0.5, 0.5, 0.5, 0.5], [0.5, 9.0, 0.5, 0.5]])
    draws = draw_workload(spec, first_latency=first)
    base = spec.reward.base_s
    assert draws.reward_s[0] == pytest.approx(first[0] + base)  # the given latencies, not drawn ones
    # the 9-s first attempt is cut at 5 s and retried: more than the timeout, fewer than the 9 s
    assert 5.0 < draws.reward_s[1, 1] < 9.0 and draws.attempts[1, 1] == 2 and draws.timeouts[1] == 1
    run = simulate(spec, "sync", draws)
    assert run.rows[1]["timing_s/reward"] > 5.0 > run.rows[0]["timing_s/reward"]
    with pytest.raises(ValueError, match="first_latency has shape"):
        draw_workload(spec, first_latency=first[:1])
