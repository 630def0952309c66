"""The balancer's readiness probe (/health) carries the key and headers every other request carries.

A gateway in front of a judge (`reward.server.headers_env`: an access-token header; LiteLLM, whose /health needs
the key) refuses /health without them: the startup check (which sent them) passed, then the balancer's
`wait_healthy` never did, and a replica marked down was never admitted again."""

from __future__ import annotations

import asyncio

import pytest
from threaded_app import ThreadedApp

from rlrm.launch.client.balancer import ReplicaBalancer

TOKEN = "gw-secret"


class Gateway(ThreadedApp):
    shutdown_timeout = 1.0

    def __init__(self):
        super().__init__()
        self.fail_next = 0

    def routes(self, app):
        from aiohttp import web

        def gated(handler):
            async def wrapped(request):
                if request.headers.get("X-Gateway-Token") != TOKEN:
                    return web.json_response({"error": {"message": "forbidden"}}, status=403)
                return await handler(request)

            return wrapped

        async def health(request):
            return web.Response(text="ok")

        async def models(request):
            return web.json_response({"data": [{"id": "judge"}]})

        async def chat(request):
            if self.fail_next:
                self.fail_next -= 1
                return web.json_response({"error": {"message": "upstream hiccup"}}, status=502)
            return web.json_response({"choices": [{"message": {"content": "ok"}}]})

        app.router.add_get("/health", gated(health))
        app.router.add_get("/v1/models", gated(models))
        app.router.add_post("/v1/chat/completions", gated(chat))


def test_wait_healthy_sends_the_configured_headers():
    async def main(url):
        bal = ReplicaBalancer([url], headers={"X-Gateway-Token": TOKEN})
        try:
            await bal.wait_healthy(1.5)
            return await bal.post("/v1/chat/completions", {"messages": []}, 5.0)
        finally:
            await bal.close()

    with Gateway() as gw:
        # the same server, probed with the headers the balancer holds, is healthy:
        assert asyncio.run(main(gw.url))["choices"]


def test_replica_marked_down_comes_back_behind_a_header_gateway():
    async def main(a, b):
        bal = ReplicaBalancer([a, b], headers={"X-Gateway-Token": TOKEN}, probe_interval_s=0.05)
        try:
            with pytest.raises(Exception, match="502"):
                await bal.post("/v1/chat/completions", {}, 5.0, url=a)  # 502: a marked down
            assert bal.healthy[a] is False
            await asyncio.sleep(1.0)  # 20 probe rounds; /health with the headers answers 200 all along
            return bal.healthy[a]
        finally:
            await bal.close()

    with Gateway() as ga, Gateway() as gb:
        ga.fail_next = 1
        assert asyncio.run(main(ga.url, gb.url)) is True, "replica never re-admitted"
