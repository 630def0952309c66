"""One rate-limit budget for a run's reward-model requests: concurrency, requests and tokens per minute.

    limiter = RateLimiter(max_concurrent=8, rpm=600, tpm=60_000)
    waited_s = await limiter.acquire(est_tokens)    # blocks until the request may go (reserve + sleep to the slot)
    limiter.release(est_tokens, used_tokens)        # after the answer: frees the slot, corrects the token budget
    limiter.pause(2.0)                              # a 429 said Retry-After: 2, every caller waits

Requests and tokens are paced, not burst: each request takes the next free slot of a virtual schedule
(GCRA: request k+1 goes `60/rpm` s after request k, and tokens advance a second schedule by
`tokens * 60/tpm` s), so no window of any length sees more than its share plus one request, and a server
that enforces its limit with a sliding window or a token bucket never answers 429. A token estimate that
the server's `usage` corrects moves the token schedule back or forward.

With Ray reward workers the whole run shares one budget: one `RateLimiter` inside a Ray actor
(rlrm/engine/rewards/ray_workers.py), which every worker asks before each request. A per-worker share
(limit / N) would leave budget idle whenever the workers are unevenly loaded; one actor costs a round trip
per request, small beside a judge call.
"""

from __future__ import annotations

import asyncio
import time


class RateLimiter:
    """Concurrency cap plus paced request and token schedules (None: that limit is off)."""

    def __init__(self, max_concurrent: int | None = None, rpm: float | None = None, tpm: float | None = None):
        self.max_concurrent, self.rpm, self.tpm = max_concurrent, rpm, tpm
        self._in_flight = 0
        self._freed: asyncio.Condition | None = None  # made in the running loop on first use
        self._next_request = 0.0  # wall-clock time of the next free request slot (one clock for every worker)
        self._next_tokens = 0.0  # ...and of the token schedule
        self._paused_until = 0.0

    @classmethod
    def from_config(cls, limits) -> RateLimiter | None:
        """A limiter for `reward.limits`, or None when it sets no limit."""
        return cls(limits.max_concurrent, limits.rpm, limits.tpm) if limits.active else None

    async def acquire(self, tokens: int) -> float:
        """Wait until a request of `tokens` (estimated) may go; returns the seconds waited."""
        return await paced(self, tokens)

    async def reserve(self, tokens: int) -> float:
        """Take a concurrency slot (waiting for one) and the next slot of the schedules: the wall-clock time the
        request may go at. The caller sleeps until then itself, so that a limiter in a Ray actor is asked once and
        the request leaves from the caller's own process at its slot, not whenever the actor's answer arrives."""
        if self.max_concurrent is not None:
            limit = self.max_concurrent
            if self._freed is None:
                self._freed = asyncio.Condition()
            async with self._freed:
                try:
                    await self._freed.wait_for(lambda: self._in_flight < limit)
                except asyncio.CancelledError:
                    # cancelled (its sample's deadline) maybe just as release() woke it: asyncio (before 3.13) does
                    # not pass that wake-up on, and the freed slot would wait for the next release
                    self._freed.notify()
                    raise
                self._in_flight += 1
        # the later of both schedules' slots, and both advance from it: a request the token schedule holds back
        # still leaves 60/rpm s after the one before it (a limit that is off keeps its schedule at 0)
        slot = max(time.time(), self._paused_until, self._next_request, self._next_tokens)
        if self.rpm is not None:
            self._next_request = slot + 60.0 / self.rpm
        if self.tpm is not None:
            self._next_tokens = slot + tokens * 60.0 / self.tpm
        return slot

    async def release(self, estimated: int, used: int) -> None:
        """The request is answered (or failed): free its slot, move the token schedule by `used - estimated`."""
        if self.tpm is not None and used != estimated:
            self._next_tokens += (used - estimated) * 60.0 / self.tpm
        if self.max_concurrent is not None and self._freed is not None:
            async with self._freed:
                self._in_flight -= 1
                self._freed.notify()

    async def pause(self, seconds: float) -> None:
        """The server said to wait (Retry-After): no request of anyone goes before then."""
        self._paused_until = max(self._paused_until, time.time() + seconds)

    async def paused_until(self) -> float:
        """The wall-clock time no request goes before (0: never paused); asked by a request that slept to its slot."""
        return self._paused_until


async def wait_for_slot(slot: float, give_back) -> bool:
    """Sleep until the wall-clock `slot`; False when this process woke up too late to use it (see below).

    When the wait is cancelled (the sample's deadline), `give_back()` first: nothing was sent. A process that
    woke up more than LATE_S after its slot (a starved CPU, a Ray answer that came late) would send its request
    together with later slots' requests: a burst the server may refuse. The caller asks for a new slot instead.
    """
    delay = slot - time.time()
    try:
        if delay > 0:
            await asyncio.sleep(delay)
    except BaseException:  # nothing was sent: the slot and its tokens go back
        await give_back()
        raise
    return time.time() - slot <= LATE_S


LATE_S = 0.1  # how late after its slot a request may still go
_MAX_TRIES = 3  # slots a request that keeps waking up late takes; it goes on the last, which it holds (concurrency
# included) until release(): a starved process must still make progress


async def paced(limiter, tokens: int) -> float:
    """Reserve a slot of `limiter` (a RateLimiter or the client of its Ray actor) and wait for it; the seconds
    waited. A slot this process woke up too late for is given back and a new one taken (at most a few times). So is
    one that a pause (a 429's Retry-After) which came while this request slept now covers: no request goes before
    the pause ends, and those that waited through it take fresh slots, paced again, rather than all go at its end."""
    start = time.time()

    def give_back():
        return limiter.release(tokens, 0)

    tries = 0
    while True:
        slot = await limiter.reserve(tokens)
        slept = slot > time.time()  # only then can a pause have come meanwhile (asking the Ray actor is a call)
        on_time = await wait_for_slot(slot, give_back)
        if slept and await _pause_covers(limiter, slot, give_back):
            await give_back()
            continue
        tries += 1
        if on_time or tries == _MAX_TRIES:
            return time.time() - start
        await give_back()


async def _pause_covers(limiter, slot: float, give_back) -> bool:
    """Whether a pause ends after `slot` (the slot goes back when this is cancelled: nothing was sent)."""
    try:
        return slot < await limiter.paused_until()
    except BaseException:
        await give_back()
        raise
