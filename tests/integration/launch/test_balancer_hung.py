"""A replica that is alive but hung (its /health answers, its requests never do) leaves the balancer's rotation.

Before, a request that timed out left the replica in rotation: least-outstanding picking sent it every other
request, each waited out its full timeout, and its /health (200 all along) could not tell. Now a replica that
answered nothing during HUNG_AFTER timed-out requests in a row is out for a quarantine, then probed again; one that
answers other requests meanwhile is slow, not hung, and stays."""

from __future__ import annotations

import asyncio
import time

import pytest
from threaded_app import ThreadedApp

from rlrm.call_errors import RequestTimeout
from rlrm.launch.client.balancer import HUNG_AFTER, ReplicaBalancer


class Replica(ThreadedApp):
    shutdown_timeout = 0.5

    def __init__(self, delay_s: float = 0.0):
        super().__init__()
        self.delay_s = delay_s
        self.calls = 0

    def routes(self, app):
        from aiohttp import web

        async def health(request):
            return web.Response(text="ok")

        async def chat(request):
            self.calls += 1
            body = await request.json()
            await asyncio.sleep(body.get("delay_s", self.delay_s))
            return web.json_response({"choices": [{"message": {"content": "ok"}}]})

        app.router.add_get("/health", health)
        app.router.add_post("/v1/chat/completions", chat)


def test_hung_replica_leaves_rotation_for_a_quarantine_then_rejoins():
    async def main(hung, good):
        bal = ReplicaBalancer([hung.url, good.url], probe_interval_s=0.02)
        try:
            for _ in range(HUNG_AFTER):
                with pytest.raises(RequestTimeout):
                    await bal.post("/v1/chat/completions", {}, 0.3, url=hung.url)
            assert bal.healthy[hung.url] is False
            calls_before = hung.calls
            for _ in range(6):  # all go to the replica that answers, though /health of the hung one is 200
                await bal.post("/v1/chat/completions", {"delay_s": 0}, 2.0)
            assert hung.calls == calls_before
            assert bal.healthy[hung.url] is False  # still in quarantine: its /health is not believed yet
            deadline = time.monotonic() + 3.0
            while not bal.healthy[hung.url] and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return bal.healthy[hung.url]
        finally:
            await bal.close()

    with Replica(delay_s=30.0) as hung, Replica() as good:
        assert asyncio.run(main(hung, good)) is True, "never re-admitted after its quarantine"


def test_slow_replica_that_answers_meanwhile_stays_in_rotation():
    async def main(a):
        bal = ReplicaBalancer([a.url], probe_interval_s=0.02)
        try:
            slow = [bal.post("/v1/chat/completions", {"delay_s": 5.0}, 0.5) for _ in range(HUNG_AFTER + 1)]
            quick = bal.post("/v1/chat/completions", {"delay_s": 0.05}, 2.0)
            results = await asyncio.gather(*slow, quick, return_exceptions=True)
            assert all(isinstance(r, RequestTimeout) for r in results[:-1])
            assert results[-1]["choices"]
            return bal.healthy[a.url]
        finally:
            await bal.close()

    with Replica() as a:
        assert asyncio.run(main(a)) is True
