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


def test_idle_connections_outlive_the_servers_keep_alive_on_both_sides(random_disrm_server):
    """Both sides in one idle wait (it is the test's cost): the balancer against a uvicorn stand-in, and a plain
    client's idle connection to the embedded server (the session's, tests/integration/conftest.py)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", random_disrm_server.port, timeout=10)
    stand_in = ServerProcess.on_free_port(lambda port: [sys.executable, "-c", STAND_IN, str(port)], start_timeout_s=60)
    with stand_in as server:

        async def scenario():
            balancer = ReplicaBalancer([server.url])
            try:
                burst = lambda: asyncio.gather(  # noqa: E731
                    *(balancer.post("/classify", {"input": [1]}, 10) for _ in range(32)), return_exceptions=True
                )
                first = await burst()
                conn.request("GET", "/health")
                said, sock = conn.getresponse().read(), conn.sock
                # the loop is busy (an update step) while both servers' keep-alive would run out: longer than
                # uvicorn's default (5 s)
                time.sleep(5.5)
                second = await burst()
                conn.request("GET", "/health")  # before the fix: RemoteDisconnected, the server had closed it
                said_again = conn.getresponse().read()
                return first, second, said, said_again, conn.sock is sock
            finally:
                await balancer.close()
                conn.close()

        first, second, said, said_again, same_connection = asyncio.run(scenario())
    assert not [r for r in first if isinstance(r, Exception)]
    failed = [str(r) for r in second if isinstance(r, TransientError)]
    assert failed == [], failed[:2]  # before the fix: "Server disconnected" for the reused connections
    # the embedded server kept the idle connection open: served on the same connection
    assert said == said_again == b"ok" and same_connection
