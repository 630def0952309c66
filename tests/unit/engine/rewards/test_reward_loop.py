"""The reward loop's fault policy, with plain async functions standing in for reward calls."""

from __future__ import annotations

import asyncio
import math
import sys

import pytest

from rlrm.call_errors import BadRequest, TransientError
from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.errors import UnparsedVerdict
from rlrm.engine.rewards.genrm import judge_prompt, parse_verdict
from rlrm.engine.rewards.loop import AttemptTimedOut, RewardError, RewardLoop, within


def sample(i=0, uid="p0"):
    return RewardSample(
        uid=uid,
        index=i,
        data_source="t",
        prompt=[{"role": "user", "content": "Q?"}],
        solution_str="#### 3",
        ground_truth="3",
        extra_info={"question": "What is 1+2?"},
    )


def cfg(**kw):
    base = {"attempt_timeout_s": 0.2, "max_retries": 2, "backoff_s": 0.0, "num_workers": 2}
    return RewardConfig(**{**base, **kw})


def run(coro):
    return asyncio.run(coro)


def test_transient_errors_are_retried_then_succeed():
    calls = []

    async def flaky(s):
        calls.append(1)
        if len(calls) < 3:
            raise TransientError("503")
        return 0.75

    loop = RewardLoop(flaky, cfg())
    assert run(loop.score(sample())).score == 0.75
    m = loop.take_metrics()
    assert len(calls) == 3 and m["reward/retries"] == 2 and m["reward/failures"] == 0


def test_retry_delays_double_with_jitter_and_never_pass_backoff_max_s(monkeypatch):
    """The jitter (x0.5 to x1.5) used to multiply the capped delay: a retry slept up to 1.5 x backoff_max_s."""
    from rlrm.engine.rewards import loop as loop_module

    slept = []
    real_sleep = asyncio.sleep

    async def record(seconds, *args):
        slept.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(loop_module.asyncio, "sleep", record)

    async def always_503(s):
        raise TransientError("503")

    config = cfg(max_retries=6, backoff_s=1.0, backoff_max_s=2.0, on_failure="default", attempt_timeout_s=5)
    for seed in range(8):
        run(RewardLoop(always_503, config, seed=seed).score(sample()))
    assert len(slept) == 8 * 6 and max(slept) <= 2.0
    firsts, lasts = slept[::6], slept[5::6]
    assert all(0.5 <= s <= 1.0 for s in firsts) and len(set(firsts)) > 1  # 1 s, jittered
    assert all(1.0 <= s <= 2.0 for s in lasts) and len(set(lasts)) > 1  # at the cap, still spread (not all at once)


def test_bad_requests_are_not_retried_and_default_is_counted():
    calls = []

    async def bad(s):
        calls.append(1)
        raise BadRequest("400: input too long")

    loop = RewardLoop(bad, cfg(on_failure="default", default_score=-1.0))
    result = run(loop.score(sample()))
    assert result.score == -1.0 and result.extra["reward_failed"] is True
    m = loop.take_metrics()
    assert len(calls) == 1 and m["reward/retries"] == 0 and m["reward/failures"] == 1 and m["reward/defaulted"] == 1


def test_timeouts_are_counted_and_retried():
    async def hang(s):
        await asyncio.sleep(10)

    loop = RewardLoop(hang, cfg(attempt_timeout_s=0.05, max_retries=1, on_failure="drop-group"))
    assert run(loop.score(sample())) is None
    m = loop.take_metrics()
    assert m["reward/timeouts"] == 2 and m["reward/retries"] == 1 and m["reward/failures"] == 1


def test_a_timeout_error_the_function_raises_is_its_failure_not_the_attempts_deadline():
    # a socket's or an HTTP client's own TimeoutError inside the function: raised at once, long before
    # attempt_timeout_s, so it is no hung attempt and is not retried (as any exception a function raises)
    calls = []

    async def raising(s):
        calls.append(1)
        raise TimeoutError("connect timed out")

    loop = RewardLoop(raising, cfg(attempt_timeout_s=30, max_retries=2, on_failure="drop-group"))
    assert run(loop.score(sample())) is None
    m = loop.take_metrics()
    assert (len(calls), m["reward/timeouts"], m["reward/retries"], m["reward/failures"]) == (1, 0, 0, 1)
    assert loop.take_hung() == [] and "raised TimeoutError: connect timed out" in loop.last_error


def test_an_attempt_runs_in_the_scoring_task_and_is_cancelled_at_its_deadline():
    # `within` bounds an attempt without a task of its own (one task a sample fewer than asyncio.wait_for), and
    # still stops one that overruns: the function sees the cancellation, the caller AttemptTimedOut.
    seen = {}

    async def quick():
        seen["task"] = asyncio.current_task()
        return 2.5

    async def slow():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen["cancelled"] = True
            raise

    async def main():
        assert await within(quick(), 1.0) == 2.5
        if sys.version_info >= (3, 11):  # 3.10 has no asyncio.timeout: wait_for's task there
            assert seen["task"] is asyncio.current_task()
        started = asyncio.get_running_loop().time()
        with pytest.raises(AttemptTimedOut):
            await within(slow(), 0.05)
        return asyncio.get_running_loop().time() - started

    waited = run(main())
    assert seen["cancelled"] and 0.05 <= waited < 5


def test_each_attempt_given_up_is_kept_with_its_sample_function_and_how_long():
    async def hang(s):
        await asyncio.sleep(10)

    async def fine(s):
        return 1.0

    loop = RewardLoop(hang, cfg(attempt_timeout_s=0.05, max_retries=1, on_failure="drop-group"))
    run(loop.score(sample(i=3, uid="p9")))
    hung = loop.take_hung()
    assert [h["attempt"] for h in hung] == [1, 2]  # both attempts, as reward/timeouts counts them
    first = hung[0]
    assert (first["uid"], first["index"], first["function"], first["attempt_timeout_s"]) == ("p9", 3, "hang", 0.05)
    assert first["response"] == "#### 3" and first["prompt"] == [{"role": "user", "content": "Q?"}]
    assert first["ground_truth"] == "3" and first["elapsed_s"] >= 0.05
    assert loop.take_hung() == []  # taken once
    fast = RewardLoop(fine, cfg())
    run(fast.score(sample()))
    assert fast.take_hung() == []  # a scored sample is never written as hung


def test_fail_policy_stops_with_the_sample_named():
    async def unparsed(s):
        raise UnparsedVerdict("no verdict")

    loop = RewardLoop(unparsed, cfg(on_failure="fail"))
    with pytest.raises(RewardError, match="sample p7 failed.*on_failure=default or drop-group"):
        run(loop.score(sample(uid="p7")))
    assert loop.stats.unparsed == 1  # not retried: the judge said what it said


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("high", "returned str for sample p0"),
        ("0.5", "returned str for sample p0"),
        ({"no_score": 1}, "returned dict"),
        ({"score": "x"}, "non-numeric"),
        ({"score": "0.5"}, "non-numeric score '0.5'"),  # refused in a dict as it is bare (it was accepted)
        ({"score": True}, "non-numeric score True"),
    ],
)
def test_wrong_return_types_name_function_and_sample(value, needle):
    async def my_compute_score(s):
        return value

    loop = RewardLoop(my_compute_score, cfg(on_failure="fail"))
    with pytest.raises(RewardError, match="my_compute_score"):
        run(loop.score(sample()))
    with pytest.raises(RewardError, match=needle) as failed:
        run(RewardLoop(my_compute_score, cfg(on_failure="fail")).score(sample()))
    assert str(failed.value).count(sample().uid) == 1  # the sample named once, not by the loop and the error both


def test_raising_function_and_nan_are_failures_not_zeros():
    async def boom(s):
        raise KeyError("ground_truth")

    async def nan(s):
        return math.nan

    loop = RewardLoop(boom, cfg())
    result = run(loop.score(sample()))
    assert "boom raised KeyError" in result.extra["reward_error"]
    loop = RewardLoop(nan, cfg())
    run(loop.score(sample()))
    assert loop.take_metrics()["reward/nonfinite"] == 1


def test_dict_results_keep_extra_info_and_order():
    async def fn(s):
        return {"score": s.index / 10, "why": f"sample {s.index}"}

    loop = RewardLoop(fn, cfg())
    results = run(loop.score_all([sample(i) for i in range(6)]))
    assert [r.score for r in results] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert results[3].extra == {"why": "sample 3"}
    assert loop.take_metrics()["reward/latency_p99"] >= 0.0


def test_the_numbers_a_dict_reports_beside_its_score_are_averaged_per_step():
    import numpy as np
    import torch

    from rlrm.engine.rewards.reported import MAX_REPORTED, reported_metrics

    async def fn(s):
        i = s.index
        if i == 3:
            raise KeyError("boom")  # a failed sample reports nothing
        extra = {"acc": i % 2 == 0, "fmt": np.float32(i / 10), "len": torch.tensor(i), "pred": str(i)}
        extra["note"] = np.array("text")  # 0-d, yet no number: kept, not averaged
        extra.update({"flag": np.bool_(True)} if i == 0 else {"nan": math.nan})
        return {"score": 1.0, **extra, "components": {"a": 1.0}, "turn_scores": [0.5]}

    loop = RewardLoop(fn, cfg(max_retries=0, tool_rewards_as_turn_scores=False))
    results = run(loop.score_all([sample(i) for i in range(5)]))
    assert results[0].extra["reported_keys"] == ["acc", "fmt", "len", "flag"]  # no text, score, components, turns
    assert results[1].extra["reported_keys"] == ["acc", "fmt", "len", "nan"]
    metrics = reported_metrics(results)
    assert metrics == pytest.approx(
        {
            "reward/reported/acc/mean": 3 / 4,  # samples 0, 2, 4 of 0, 1, 2, 4 (3 failed)
            "reward/reported/fmt/mean": (0 + 0.1 + 0.2 + 0.4) / 4,
            "reward/reported/len/mean": (0 + 1 + 2 + 4) / 4,
            "reward/reported/flag/mean": 1.0,
        }
    )  # "nan" is never finite: no metric
    # what rlrm adds to a function's dict (its model calls' counts, reward.inject's latency) is not the function's
    from rlrm.engine.rewards.ledger import LEDGER_KEYS, CallLedger

    ledger = CallLedger()
    ledger.model_calls = 2
    assert tuple(ledger.as_extra()) == LEDGER_KEYS

    async def counted(s):
        return {"score": 1.0, "acc": 1, **ledger.as_extra(), "injected_latency_s": 0.1}

    counted_results = run(RewardLoop(counted, cfg()).score_all([sample(0)]))
    assert counted_results[0].extra["reported_keys"] == ["acc"]
    many = [
        type(results[0])(
            1.0, {"reported_keys": [f"k{i:02d}" for i in range(40)], **{f"k{i:02d}": i for i in range(40)}}
        )
    ]
    assert len(reported_metrics(many)) == MAX_REPORTED and "reward/reported/k31/mean" in reported_metrics(many)


def test_parse_verdict():
    assert parse_verdict("3 + 4 = 7\nScore: 10") == 1.0
    assert parse_verdict("Score: 10 ... on reflection Score: 0") == 0.0  # the last verdict counts
    assert parse_verdict("Score: 7") == pytest.approx(0.7)
    assert parse_verdict("Score: 42") == 1.0  # clipped to [0, 1]
    assert parse_verdict("no verdict here") is None
    assert parse_verdict(r"so \boxed{8}", style="boxed") == pytest.approx(0.8)
    # as chat models write it: in Markdown bold (counted unparsed), with a full-width colon
    for bold in ("**Score:** 8", "Score: **8**", "**Score**: 8", "__Score:__ 8", "Score\uff1a8"):
        assert parse_verdict(bold) == pytest.approx(0.8), bold
    # a reasoning judge served without a reasoning parser: the verdict is its final answer's, never one its
    # reasoning weighed (read 0.3 where the answer says 10, and 1.0 where the answer gives none)
    weighed = "<think>Score: 3 would be far too low; it deserves full marks.</think>\n\n**Score:** 10"
    assert parse_verdict(weighed) == 1.0
    assert parse_verdict("at first glance Score: 10. But wait, it ends with 41.\n</think>\n\nIncorrect.") is None
    assert parse_verdict("<think>Score: 10, so far ... (cut)") is None  # reasoning still open: no answer yet
    # a plain judge that mentions a reasoning policy's <think> block is read whole; a bold heading over a list is
    # no verdict (read 0.1 from its first item)
    assert parse_verdict("The response's <think> block reaches 42, the answer. Score: 10") == 1.0
    assert parse_verdict("**Score:**\n\n1. Correctness: right\n2. Working: shown") is None
    assert parse_verdict("Score:\n8") == pytest.approx(0.8)
    assert parse_verdict(r"<think>maybe \boxed{2}</think> \boxed{9}", style="boxed") == pytest.approx(0.9)
    assert judge_prompt("Q: {question} A: {response} R: {reference}", sample()) == "Q: What is 1+2? A: #### 3 R: 3"


def test_a_judge_answer_without_content_is_no_verdict():
    # a reasoning parser's answer may carry reasoning_content and no content key: a KeyError counted as a failure,
    # not in reward/unparsed
    from rlrm.engine.rewards.genrm import make_genrm_reward

    class Judge:
        async def post(self, path, body, timeout_s):
            message = {"role": "assistant", "reasoning_content": "Score: 10"}
            return {"choices": [{"message": message, "finish_reason": "stop"}], "usage": {"completion_tokens": 5}}

    judge = make_genrm_reward(RewardConfig(kind="genrm", server={"model": "judge"}), Judge())
    with pytest.raises(UnparsedVerdict, match="judge gave no verdict"):
        asyncio.run(judge(sample()))


def test_counters_are_taken_per_tag_the_sample_was_scored_for():
    # One-step-off scores batch k+1 while step k waits: step k takes its own samples' counters only.
    from rlrm.engine.rewards.tags import SCORED_FOR

    async def fails_for_tag_2(s):
        if SCORED_FOR.get() == 2:
            raise BadRequest("400")
        return 1.0

    loop = RewardLoop(fails_for_tag_2, cfg(on_failure="default"))

    async def scored_for(tag, i):  # a task of its own, as the rollouter's samples: the tag stays in it
        SCORED_FOR.set(tag)
        return await loop.score(sample(i))

    async def three_samples():
        await asyncio.gather(scored_for(1, 0), scored_for(2, 1), scored_for(2, 2))
        return SCORED_FOR.get()

    assert run(three_samples()) is None  # the caller's context never saw a tag
    assert loop.stats_of([2]).failures == 2 and loop.stats_of().samples == 3  # peeked, not taken
    first = loop.take_metrics(tags=[1])
    assert first["reward/samples"] == 1 and first["reward/failures"] == 0
    rest = loop.take_metrics()  # no tags: everything left
    assert rest["reward/samples"] == 2 and rest["reward/failures"] == 2 and rest["reward/defaulted"] == 2
    assert loop.take_metrics()["reward/samples"] == 0


def test_a_return_or_a_tool_reward_beyond_float32_is_a_counted_non_finite_score():
    # each number was within float32's range, but the return (score + turn scores) was inf in the step's float32
    # tensors, and a tool's reward was only checked finite: NaN advantages for the whole group
    def turns(reward):
        return {"turns": [{"role": "assistant", "content": "a", "tool_reward": reward}]}

    async def fn(s):
        return {"score": 3e38, "turn_scores": [3e38]} if s.index == 0 else 1.0

    loop = RewardLoop(fn, cfg(max_retries=0, on_failure="default", default_score=0.0))
    results = run(loop.score_all([sample(0), sample(1)]))
    assert [r.score for r in results] == [0.0, 1.0] and loop.take_metrics()["reward/nonfinite"] == 1
    tool_sample = RewardSample("p1", 0, "t", [{"role": "user", "content": "Q?"}], "#### 3", "3", turns(1e39))

    async def one(s):
        return 1.0

    tooled = RewardLoop(one, cfg(max_retries=0, on_failure="default", tool_rewards_as_turn_scores=True))
    assert run(tooled.score_all([tool_sample]))[0].score == 0.0
    assert tooled.take_metrics()["reward/nonfinite"] == 1


def test_latency_counts_the_wait_for_a_concurrency_slot():
    # docs/metrics.md: "from a sample's reward request to its score"; a sample queued behind reward.max_concurrency
    # was timed from when it got its slot, and the queueing never showed as latency
    async def slow(s):
        await asyncio.sleep(0.1)
        return 1.0

    loop = RewardLoop(slow, cfg(max_concurrency=1, num_workers=1))
    run(loop.score_all([sample(i) for i in range(4)]))
    assert loop.take_metrics()["reward/latency_p99"] >= 0.35  # the last waited for 3 before it
