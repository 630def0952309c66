"""The reward failure budget (rlrm/engine/rewards/budget.py) and its display, in the loop without a run."""

from __future__ import annotations

import asyncio

import pytest

from rlrm.call_errors import TransientError
from rlrm.config.reward import RewardConfig
from rlrm.engine.metrics.display import _summary
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.budget import RewardBudgetExceeded, check_failure_budget
from rlrm.engine.rewards.loop import RewardLoop

ROW = {
    "reward/samples": 16,
    "reward/failures": 9,
    "reward/defaulted": 9,
    "reward/dropped_groups": 0,
    "reward/timeouts": 27,
    "reward/injected_failures": 0,
    "reward/retries": 27,
}


def test_over_the_budget_stops_with_the_kinds_and_the_last_error():
    with pytest.raises(RewardBudgetExceeded) as info:
        check_failure_budget(4, ROW, RewardConfig(), "no reward within\nreward.attempt_timeout_s=30 s")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "step 4: 9 of 16 reward samples failed (56%, over reward.max_failure_rate=0.5; reward.max_retries=3)"
    )
    assert (
        "9 defaulted, 0 groups dropped; timeouts 27, retries 27; last error: no reward within reward.attempt_timeout_s=30 s."
        in message
    )


def test_a_judge_whose_answers_do_not_parse_is_pointed_at_its_prompt_and_format_not_its_servers():
    unparsed = {**ROW, "reward/timeouts": 0, "reward/retries": 0, "reward/unparsed": 9}
    for row, fix in ((unparsed, "reward.genrm.template, reward.genrm.verdict"), (ROW, "are its servers up?")):
        with pytest.raises(RewardBudgetExceeded, match=fix.replace("?", "\\?")):
            check_failure_budget(
                1,
                row,
                RewardConfig(kind="genrm", server={"model": "tiny:judge"}),
                "judge gave no verdict for sample s/1: 'none'",
            )


def test_requests_the_servers_refused_point_at_what_they_refused_not_at_whether_they_are_up():
    refused = "http://127.0.0.1:30000/v1/chat/completions answered 400: temperature: Validation error: range [...]"
    with pytest.raises(RewardBudgetExceeded) as info:
        check_failure_budget(1, ROW, RewardConfig(kind="genrm", server={"model": "tiny:judge"}), refused)
    assert "Fix what the reward servers refused in its requests" in str(info.value)
    assert "are its servers up" not in str(info.value)


@pytest.mark.parametrize(
    ("row", "rate"),
    [
        ({**ROW, "reward/failures": 8}, 0.5),  # exactly at the budget: goes on
        (ROW, 1.0),  # 1 never stops
        ({**ROW, "reward/samples": 0, "reward/failures": 0}, 0.0),  # a window that scored nothing (off-policy modes)
        ({**ROW, "reward/failures": 0}, 0.0),
    ],
)
def test_within_the_budget_goes_on(row, rate):
    check_failure_budget(1, row, RewardConfig(max_failure_rate=rate), None)


def test_the_loop_counts_samples_and_keeps_the_last_error_across_steps():
    async def dead(sample):
        raise TransientError(f"connection refused ({sample.uid})")

    loop = RewardLoop(dead, RewardConfig(max_retries=1, backoff_s=0.0))
    samples = [
        RewardSample(uid=f"p{i}", index=i, data_source="t", prompt=[], solution_str="", ground_truth="1")
        for i in range(3)
    ]
    asyncio.run(loop.score_all(samples))
    metrics = loop.take_metrics()
    assert metrics["reward/samples"] == 3 and metrics["reward/failures"] == 3 and metrics["reward/retries"] == 3
    assert loop.last_error.startswith("connection refused (p")
    assert loop.take_metrics()["reward/samples"] == 0 and loop.last_error is not None


def test_the_display_shows_failures_whenever_there_are_any():
    quiet = _summary({"critic/score/mean": 0.5, "reward/failures": 0, "reward/defaulted": 0})
    assert "failures" not in quiet
    shown = _summary(
        {"critic/score/mean": 0.5, "reward/failures": 3, "reward/defaulted": 1, "reward/dropped_groups": 1}
    )
    assert shown.endswith("reward failures 3 (1 defaulted, 1 groups dropped)")


def test_the_display_shows_rule_agreement_beside_a_model_reward():
    """A DisRM's raw logit can fall while answers improve: the step line also shows agreement with the rule."""
    line = _summary({"critic/score/mean": -5.1, "reward/rule_agreement": 0.953, "perf/throughput": 10.0})
    assert line.startswith("reward -5.100  rule agree 0.95  ")
    assert "rule agree" not in _summary({"critic/score/mean": 0.5})
