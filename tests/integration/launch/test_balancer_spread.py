"""The client balancer sends each request to the replica with the fewest in flight, and replicas tied for that take
turns. Before, requests that came one at a time (each answered before the next: none in flight anywhere) all went
to the first replica: in the settings sweep of 2026-11-28, one of tiny-fapo's two judge replicas got next to none."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter

from rlrm.launch.client.balancer import ReplicaBalancer
from rlrm.launch.fleet.process import ServerProcess

# a replica that says which one it is, and answers /slow once /release came (a request that stays in flight for as
# long as the test needs, however slow the machine)
REPLICA = """
import asyncio, sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

port = int(sys.argv[1])
released = None

async def who(request):
    global released
    if request.url.path == "/slow":
        released = released or asyncio.Event()
        await asyncio.wait_for(released.wait(), 60)
    return JSONResponse({"port": port})

async def release(request):
    global released
    released = released or asyncio.Event()
    released.set()
    return JSONResponse({"port": port})

async def health(request):
    return PlainTextResponse("ok")

routes = [Route("/who", who, methods=["POST"]), Route("/slow", who, methods=["POST"]), Route("/health", health)]
routes.append(Route("/release", release, methods=["POST"]))
uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning")
"""


def _replica() -> ServerProcess:
    return ServerProcess.on_free_port(lambda port: [sys.executable, "-c", REPLICA, str(port)], start_timeout_s=60)


def test_requests_one_at_a_time_take_the_replicas_in_turn():
    with _replica() as a, _replica() as b, _replica() as c:

        async def scenario():
            balancer = ReplicaBalancer([a.url, b.url, c.url])
            try:
                one_at_a_time = [(await balancer.post("/who", {}, 10))["port"] for _ in range(9)]
                # one request held at `a`: the next ones go to the other two, in turn, while it is in flight
                held = asyncio.ensure_future(balancer.post("/slow", {}, 60, url=a.url))
                while balancer.outstanding[a.url] != 1:  # sent, and in flight until released
                    await asyncio.sleep(0.01)
                beside = [(await balancer.post("/who", {}, 10))["port"] for _ in range(4)]
                await balancer.post("/release", {}, 10, url=a.url)
                await held
                return one_at_a_time, beside
            finally:
                await balancer.close()

        one_at_a_time, beside = asyncio.run(scenario())
    assert Counter(one_at_a_time) == {a.port: 3, b.port: 3, c.port: 3}, one_at_a_time
    assert Counter(beside) == {b.port: 2, c.port: 2}, beside
