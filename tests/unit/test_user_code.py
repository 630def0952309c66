"""What rlrm/user_code.py tells of a user's function: whether calling it gives a coroutine (`is_async`)."""

from __future__ import annotations

import asyncio
import functools

from rlrm.user_code import is_async


async def judged(x):
    return x


class Judge:
    async def __call__(self, x):
        return x


class Anything:
    def __getattr__(self, name):  # answers every name: not its type's __call__
        return lambda *a: None

    async def __call__(self, x):
        return x


@functools.wraps(judged)
def bridge(x):  # a sync bridge over an async def: asyncio.run inside
    return asyncio.run(judged(x))


def test_what_gives_a_coroutine():
    assert is_async(judged) and is_async(functools.partial(judged, 1)) and is_async(Judge()) and is_async(Anything())
    assert not is_async(bridge)  # a plain function, whatever it wraps: its result is awaited where it runs
    assert not is_async(Judge)  # calling the class builds an instance
    assert not is_async(print) and not is_async(functools.partial(print, 1)) and not is_async(len)
