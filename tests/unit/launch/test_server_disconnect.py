"""A generation whose client hung up is cancelled: the server asks every DISCONNECT_POLL_S whether the client is
still there (rlrm/launch/server/endpoints.py `_while_connected`), and cancels the engine's work for it, which then
drops it from its queue or stops the batch (tests/unit/inference/test_hf_faults.py)."""

from __future__ import annotations

import asyncio

import pytest

from rlrm.launch.server import endpoints
from rlrm.launch.server.protocol import RequestError


class _Client:
    def __init__(self, gone_after_polls: int):
        self.polls, self.gone_after = 0, gone_after_polls

    async def is_disconnected(self) -> bool:
        self.polls += 1
        return self.polls >= self.gone_after


def test_a_client_that_hangs_up_cancels_its_generation(monkeypatch):
    monkeypatch.setattr(endpoints, "DISCONNECT_POLL_S", 0.01)
    client = _Client(gone_after_polls=3)

    async def scenario():
        endpoints._request.set(client)
        work = asyncio.ensure_future(asyncio.sleep(60))
        with pytest.raises(RequestError, match="the client closed the connection") as err:
            await endpoints._while_connected(work)
        await asyncio.sleep(0)
        return work, err.value.status

    work, status = asyncio.run(scenario())
    assert work.cancelled() and status == 499 and client.polls == 3


def test_a_client_that_stays_gets_its_result(monkeypatch):
    monkeypatch.setattr(endpoints, "DISCONNECT_POLL_S", 0.01)
    client = _Client(gone_after_polls=10**9)

    async def scenario():
        endpoints._request.set(client)
        return await endpoints._while_connected(asyncio.ensure_future(asyncio.sleep(0.05, result="done")))

    assert asyncio.run(scenario()) == "done" and client.polls >= 2
