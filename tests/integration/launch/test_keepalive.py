"""Idle keep-alive connections: the balancer never reuses one a server may already have closed, and the
embedded server keeps idle connections longer than clients pool them.

Why it matters: a run's event loop is busy between reward phases (generation, the update), servers built
on uvicorn close connections idle for 5 s, and a pooled connection whose close the client has not yet
read fails its next request ("Server disconnected"). That was the burst of retries seen steps after a
DisRM replica restart; it came without any restart too.
"""

from __future__ import annotations

import asyncio
import sys
import time

from rlrm.call_errors import TransientError
from rlrm.launch.client.balancer import ReplicaBalancer
from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.process import ServerProcess

# A stand-in for vLLM / SGLang: a uvicorn app with uvicorn's default keep-alive (5 s), as they use.
STAND_IN = """
import sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

async def classify(request):
    return JSONResponse({"data": [{"probs": [0.5]}]})

async def health(request):
    return PlainTextResponse("ok")

app = Starlette(routes=[Route("/classify", classify, methods=["POST"]), Route("/health", health)])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def test_the_balancer_drops_connections_idle_longer_than_servers_keep_them():
    port = free_port()
    with ServerProcess([sys.executable, "-c", STAND_IN, str(port)], port=port, start_timeout_s=60) as server:

        async def scenario():
            balancer = ReplicaBalancer([server.url])
            try:
                burst = lambda: asyncio.gather(  # noqa: E731
                    *(balancer.post("/classify", {"input": [1]}, 10) for _ in range(32)), return_exceptions=True
                )
                first = await burst()
                time.sleep(5.5)  # the loop is busy (an update step) while the server's keep-alive runs out
                second = await burst()
                return first, second
            finally:
                await balancer.close()

        first, second = asyncio.run(scenario())
    assert not [r for r in first if isinstance(r, Exception)]
    failed = [str(r) for r in second if isinstance(r, TransientError)]
    assert failed == [], failed[:2]  # before the fix: "Server disconnected" for the reused connections


def test_the_embedded_server_keeps_an_idle_connection_open(random_disrm_server):
    import http.client

    server = random_disrm_server  # the session's (tests/integration/conftest.py)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", "/health")
        assert conn.getresponse().read() == b"ok"
        sock = conn.sock
        time.sleep(5.5)  # longer than uvicorn's default keep-alive (5 s)
        conn.request("GET", "/health")  # before the fix: RemoteDisconnected, the server had closed it
        assert conn.getresponse().read() == b"ok" and conn.sock is sock  # served on the same connection
    finally:
        conn.close()
