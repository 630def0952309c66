"""The run's rate-limit budget (rlrm/engine/rewards/limits.py): paced slots, a token schedule corrected by usage,
a concurrency cap, a pause every caller honours. Slot times are checked as offsets from the first slot, or on a
clock the test moves itself (`clock`), so the machine's speed does not enter the numbers."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from rlrm.engine.rewards import limits
from rlrm.engine.rewards.limits import RateLimiter
from rlrm.engine.rewards.metered import estimate_tokens
from rlrm.engine.rewards.ray_workers import RemoteLimiter


async def settle() -> None:
    """Let every task that can run, run (they wait on each other and the clock, never on real time)."""
    for _ in range(50):
        await asyncio.sleep(0)


class Clock:
    """limits.py's time, moved by the test: `time()` reads it, and `sleep()` parks its caller until `run_to` passes
    its wake-up time (earliest first)."""

    def __init__(self, now: float = 1000.0):
        self.now = now
        self.sleeping: list[tuple[float, asyncio.Future]] = []

    def time(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        woken = asyncio.get_running_loop().create_future()
        self.sleeping.append((self.now + delay, woken))
        await woken

    async def run_to(self, until: float) -> None:
        await settle()
        while True:
            self.sleeping = [(t, w) for t, w in self.sleeping if not w.done()]  # a cancelled sleep drops out
            due = [(t, w) for t, w in self.sleeping if t <= until]
            if not due:
                break
            self.now, woken = min(due, key=lambda d: d[0])
            woken.set_result(None)
            await settle()
        self.now = until


class _Asyncio:
    """limits.py's `asyncio`, its sleep on the clock."""

    def __init__(self, sleep):
        self.sleep = sleep

    def __getattr__(self, name):
        return getattr(asyncio, name)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(limits, "time", SimpleNamespace(time=clock.time))
    monkeypatch.setattr(limits, "asyncio", _Asyncio(clock.sleep))
    return clock


class _ActorHandle:
    """A Ray actor's handle over a RateLimiter, as Ray runs it: `method.remote()` starts the call on the actor and
    gives an ObjectRef, and cancelling an await of that ref leaves the actor's call running to its end."""

    def __init__(self, limiter: RateLimiter):
        self.limiter = limiter

    def __getattr__(self, name):
        method = getattr(self.limiter, name)
        return SimpleNamespace(remote=lambda *args: _ObjectRef(asyncio.ensure_future(method(*args))))


class _ObjectRef:
    def __init__(self, call: asyncio.Future):
        self.call = call

    def __await__(self):
        return asyncio.shield(self.call).__await__()


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


def test_a_request_that_keeps_waking_late_goes_holding_its_slot(monkeypatch):
    # a starved process: every wake-up counts as late, so every slot but the last goes back
    monkeypatch.setattr(limits, "LATE_S", -1.0)

    async def scenario():
        limiter = RateLimiter(max_concurrent=1)
        await limiter.acquire(1)  # the request goes on its last slot...
        held = limiter._in_flight  # ...holding it
        await limiter.release(1, 1)  # answered, as MeteredBalancer._limited releases
        freed = limiter._in_flight
        await limiter.acquire(1)  # the next request, in flight
        waiting = asyncio.ensure_future(limiter.acquire(1))
        await settle()
        capped = not waiting.done()  # max_concurrent=1 still holds
        waiting.cancel()
        return held, freed, capped

    assert asyncio.run(scenario()) == (1, 0, True)


def test_a_request_the_token_schedule_holds_back_still_paces_the_next(clock):
    async def scenario():
        limiter = RateLimiter(rpm=60, tpm=600)  # 1 s apart; 10 tokens a second
        return [await limiter.reserve(t) for t in (100, 1, 1, 1)]

    slots = asyncio.run(scenario())
    # the 100 tokens hold the token schedule 10 s; each request after goes 1 s after the one before (rpm)
    assert [round(s - slots[0], 6) for s in slots] == [0.0, 10.0, 11.0, 12.0]


def test_a_waiter_cancelled_as_a_slot_frees_passes_the_slot_on():
    async def scenario():
        limiter = RateLimiter(max_concurrent=1)
        await limiter.reserve(1)  # A holds the only slot
        b = asyncio.ensure_future(limiter.reserve(1))
        c = asyncio.ensure_future(limiter.reserve(1))
        await settle()  # B and C wait for it
        await limiter.release(1, 1)  # A is answered: B is woken...
        b.cancel()  # ...as its sample's deadline passes
        await settle()
        return c.done(), limiter._in_flight

    assert asyncio.run(scenario()) == (True, 1)  # C has the slot


def test_a_reserve_cancelled_while_the_ray_actor_answers_gives_its_slot_back(clock):
    async def scenario():
        actor = RateLimiter(max_concurrent=1)
        remote = RemoteLimiter(_ActorHandle(actor))
        await remote.acquire(1)  # A holds the only slot
        b = asyncio.ensure_future(remote.acquire(1))  # B's reserve() waits on the actor for a slot
        await settle()
        b.cancel()  # B's sample's deadline: the actor's reserve() goes on
        await settle()
        await remote.release(1, 1)  # A is answered: the actor gives B's reserve() the slot, which B gives back
        await settle()
        c = asyncio.ensure_future(remote.acquire(1))
        await settle()
        return c.done(), actor._in_flight

    assert asyncio.run(scenario()) == (True, 1)  # C has the slot


@pytest.mark.parametrize("where", ["local", "ray"])
def test_a_pause_holds_back_requests_already_waiting_for_their_slot(clock, where):
    async def scenario():
        limiter = RateLimiter(rpm=60)  # 1 s apart
        asked = limiter if where == "local" else RemoteLimiter(_ActorHandle(limiter))
        went = []

        async def request():
            await asked.acquire(1)
            went.append(clock.now - 1000)

        tasks = [asyncio.ensure_future(request()) for _ in range(3)]
        await settle()  # the first went at 0; the others sleep to their slots at 1 and 2 s
        await asked.pause(5.0)  # the first was answered 429, Retry-After: 5
        await clock.run_to(1020)
        await asyncio.gather(*tasks)
        return went

    # none goes before the pause ends, and those that waited through it are paced again after it
    assert asyncio.run(scenario()) == [0.0, 5.0, 6.0]
