"""The FAPO-style example (examples/rewards/fapo_judge.py) in a short tiny-fapo training run against the tiny
judge: the rule first, the judge (through the address rlrm hands the function, SGLang's /generate with the judge
tokenizer's ids) only for rule-correct samples, so judge calls = rule-correct samples, each one counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from small_run import SMALL_RUN

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.metrics.trace import read_chrome_trace
from rlrm.engine.trainer import start_run, train

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "rewards" / "fapo_judge.py"


@pytest.mark.parametrize(
    "judge",
    [
        "tiny:policy",  # default tier: mechanics only (its verdicts are mostly none: "flawed")
        pytest.param("tiny:judge", marks=pytest.mark.slow),  # the tiny-fapo profile as shipped
    ],
)
def test_fapo_calls_the_judge_only_for_rule_correct_samples(tmp_path, tiny_policy_path, judge):
    profile = load_profile(
        "tiny-fapo",
        [
            *SMALL_RUN,
            "rollout.max_new_tokens=12",  # room for a whole answer: some are right, and judged
            f"reward.server.model={judge}",
            "trainer.total_steps=2",
            f"reward.custom.path={EXAMPLE}",
            "logging.save_samples=true",
        ],
    )
    run_dir = start_run(profile, tmp_path / "fapo")
    assert train(run_dir).last_step == 2
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] > 0]
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert rows and all(r["reward/failures"] == 0 for r in rows)
    assert sum(r["reward/model_calls"] for r in rows) > 0  # some answers were right: the judge was asked
    for row in rows:
        step = [s for s in samples if s["step"] == row["step"]]
        right = [s for s in step if s["reward_extra_info"]["rule"] == 1.0]
        judged = [s for s in step if s["reward_extra_info"]["judged"]]
        assert judged == right  # the rule spared every wrong answer a judge call
        assert row["reward/model_calls"] == len(right)
        assert (row["reward/judge_completion_tokens"] > 0) == bool(right)
        for s in judged:
            call = s["reward_extra_info"]["model_requests"][0]
            assert call["call"] == "POST /generate" and call["status"] == 200
            expected = 1.0 - 0.5 * s["reward_extra_info"]["flawed"]
            assert s["score"] == expected
    # each judge call is a span of the trace, inside the reward span of the sample that made it
    events = read_chrome_trace((run_dir / "trace.json").read_bytes())
    calls = [e for e in events if e.get("name") == "POST /generate"]
    assert len(calls) == sum(r["reward/model_calls"] for r in rows)
    rewards = {
        (e["args"]["batch"], e["args"]["sample"]): e for e in events if e.get("name") == "reward" and "args" in e
    }
    for call in calls:
        span = rewards[call["args"]["batch"], call["args"]["sample"]]
        assert call["cat"] == "reward" and call["args"]["status"] == 200
        assert span["ts"] - 1 <= call["ts"] and call["ts"] + call["dur"] <= span["ts"] + span["dur"] + 1
