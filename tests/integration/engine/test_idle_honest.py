"""idle/reward of the overlapping modes, recomputed from trace.json's reward spans: a reward call in flight across
the end of a step is busy in that step (rlrm/engine/metrics/idle.py). Before, one-step-off wrote idle/reward 1.0
for a step whose reward was busy about 90% of it (trace.json said 0.094)."""

from __future__ import annotations

import json

from small_run import SMALL_RUN

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.intervals import union_length
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train


def test_one_step_off_idle_reward_is_the_traces(tmp_path, tiny_policy_path):
    extra = [
        "trainer.mode=one-step-off",
        "trainer.total_steps=3",
        "rollout.max_new_tokens=2",  # quick generation: the next batch's rewards start early in the step
        "actor.ppo_epochs=6",  # a long update: the step ends while they are in flight
        "reward.inject.latency=fixed:1.0",
    ]
    run_dir = start_run(load_profile("tiny-rule", [*SMALL_RUN, *extra]), tmp_path / "run")
    train(run_dir)
    events = json.loads((run_dir / "trace.json").read_text())["traceEvents"]
    reward = [
        (e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6) for e in events if e.get("ph") == "X" and e["cat"] == "reward"
    ]
    seen = []
    for row in read_metrics(run_dir / "metrics.jsonl"):
        if row["step"] == 0:
            continue
        end = row["perf/wall_s"]  # trace times count from the same origin
        window = (end - row["perf/time_per_step"], end)
        from_trace = 1 - union_length(reward, window) / (window[1] - window[0])
        seen.append((row["step"], round(row["idle/reward"], 3), round(from_trace, 3)))
    assert all(abs(reported - traced) <= 0.05 for _, reported, traced in seen), seen
