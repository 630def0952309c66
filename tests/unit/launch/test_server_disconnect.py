"""A generation whose client hung up is cancelled: the server asks every DISCONNECT_POLL_S whether the client is
still there (rlrm/launch/server/endpoints.py `_while_connected`); `generate_batch` then cancels the engine's work, which
drops it from its queue or stops the batch (tests/unit/inference/test_hf_faults.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from rlrm.inference.base import SamplingParams
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

    started: list[asyncio.Task] = []

    async def generate(prompt_ids, sampling):  # the engine's: a generation that takes a minute
        started.append(asyncio.current_task())
        await asyncio.sleep(60)

    backend = SimpleNamespace(max_len=64, engine=SimpleNamespace(generate=generate))
    cfg = SimpleNamespace(role=SimpleNamespace(generates=True), max_queue=8)
    ep = endpoints.Endpoints(SimpleNamespace(), cfg, backend)

    async def scenario():
        endpoints._request.set(client)
        with pytest.raises(RequestError, match="the client closed the connection") as err:
            await ep.generate([5, 6], SamplingParams(max_new_tokens=4, seed=1), n=2)
        await asyncio.sleep(0)
        return err.value.status

    status = asyncio.run(scenario())
    assert len(started) == 2 and all(work.cancelled() for work in started)
    assert status == 499 and client.polls == 3 and ep.inflight == 0


def test_a_client_that_stays_gets_its_result(monkeypatch):
    monkeypatch.setattr(endpoints, "DISCONNECT_POLL_S", 0.01)
    client = _Client(gone_after_polls=10**9)

    async def scenario():
        endpoints._request.set(client)
        return await endpoints._while_connected(asyncio.ensure_future(asyncio.sleep(0.05, result="done")))

    assert asyncio.run(scenario()) == "done" and client.polls >= 2
