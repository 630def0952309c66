"""A balancer closed while requests are in flight (a run stopped between steps while one-step-off generation goes
on): the requests it cuts off fail, and nothing keeps probing the replicas on the closed session."""

from __future__ import annotations

import asyncio

from aiohttp import web

from rlrm.launch.client.balancer import ReplicaBalancer


async def _hanging_server() -> tuple[web.AppRunner, str]:
    async def hang(request):
        await asyncio.sleep(3)
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/generate", hang)

    async def unhealthy(request):
        return web.Response(status=503)

    app.router.add_get("/health", unhealthy)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


def test_requests_cut_off_by_close_start_no_prober_on_the_closed_session():
    async def main() -> list:
        runner, url = await _hanging_server()
        balancer = ReplicaBalancer([url])
        try:
            request = asyncio.create_task(balancer.post("/generate", {}, timeout_s=20))
            await asyncio.sleep(0.3)  # the request is waiting on the server
            await balancer.close()
            outcome = (await asyncio.gather(request, return_exceptions=True))[0]
            await asyncio.sleep(0.2)  # a prober started now would run (and fail on the closed session)
            left = [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "ReplicaBalancer._probe"]
            left += [balancer._prober] if balancer._prober is not None else []  # one that ran and failed already
            return [outcome, left, balancer.healthy[url]]
        finally:
            await runner.cleanup()

    outcome, left, healthy = asyncio.run(main())
    assert isinstance(outcome, Exception)  # cut off, not answered
    assert not healthy  # marked down ...
    assert left == []  # ... but no prober started on the closed session
