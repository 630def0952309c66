"""The run's rate-limit budget (rlrm/engine/rewards/limits.py): paced slots, a token schedule corrected by usage,
a concurrency cap, a pause every caller honours. Slot times are checked as offsets from the first slot, so the
machine's speed does not enter the numbers."""

from __future__ import annotations

import asyncio

import pytest

from rlrm.engine.rewards.limits import RateLimiter
from rlrm.engine.rewards.metered import estimate_tokens


def test_requests_are_paced_at_the_rate_not_burst():
    async def scenario():
        limiter = RateLimiter(rpm=600)  # one request every 0.1 s
        return [await limiter.reserve(1) for _ in range(5)]

    slots = asyncio.run(scenario())
    # 60 / 600 = 0.1 s apart, from the first slot on
    assert [round(s - slots[0], 6) for s in slots] == [0.0, 0.1, 0.2, 0.3, 0.4]


def test_tokens_advance_their_schedule_and_usage_corrects_it():
    async def scenario():
        limiter = RateLimiter(tpm=6000)  # 100 tokens a second
        first = await limiter.reserve(50)  # next token slot: first + 0.5 s
        await limiter.release(50, 20)  # it used 20: the schedule moves back by 30 tokens = 0.3 s
        second = await limiter.reserve(10)
        return second - first

    # the second request may go 0.5 - 0.3 = 0.2 s after the first
    assert asyncio.run(scenario()) == pytest.approx(0.2, abs=0.01)


def test_concurrency_cap_holds_until_release():
    async def scenario():
        limiter = RateLimiter(max_concurrent=2)
        await limiter.acquire(1)
        await limiter.acquire(1)
        third = asyncio.ensure_future(limiter.acquire(1))
        await asyncio.sleep(0.05)
        blocked = not third.done()
        await limiter.release(1, 1)
        await asyncio.wait_for(third, 1.0)
        return blocked

    assert asyncio.run(scenario())


def test_a_pause_holds_every_caller():
    async def scenario():
        limiter = RateLimiter(rpm=6000)
        before = await limiter.reserve(1)
        await limiter.pause(2.0)
        return (await limiter.reserve(1)) - before

    assert asyncio.run(scenario()) >= 2.0


def test_token_estimate_is_answer_budget_plus_prompt():
    chat = {"messages": [{"role": "user", "content": "x" * 400}], "max_tokens": 32}
    assert 32 + 100 <= estimate_tokens(chat) <= 32 + 115  # the JSON of the messages, 4 characters a token
    assert estimate_tokens({"input_ids": [1] * 50, "sampling_params": {"max_new_tokens": 16}}) == 66
    assert estimate_tokens(b"not json") == 1
