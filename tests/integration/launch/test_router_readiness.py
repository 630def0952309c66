"""The SGLang router answers its /health before it has registered its workers (it checks each worker's /health
first), and answers requests in between with 503 `no_available_workers`: seen in CI under load at 7aa95c7, where
a custom reward's first calls through the router failed and were retried. rlrm's router is started when it can
route: `/readiness`, then every worker listed healthy on `/workers`."""

from __future__ import annotations

import importlib.util
import sys

import httpx
import pytest

from rlrm.launch.fleet.process import ServerProcess, ServerStartError
from rlrm.launch.fleet.router import sglang_router, wait_for_workers

pytestmark = pytest.mark.skipif(importlib.util.find_spec("sglang_router") is None, reason="sglang-router not installed")

# a worker whose /health takes 1.5 s: the router registers it that much after its own /health answers
SLOW_HEALTH = """
import asyncio, sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

async def health(request):
    await asyncio.sleep(float(sys.argv[2]))
    return PlainTextResponse("ok")

async def generate(request):
    return JSONResponse({"text": "hi", "meta_info": {}})

routes = [Route("/health", health), Route("/generate", generate, methods=["POST"])]
uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def _worker(health_s: float) -> ServerProcess:
    argv_on = lambda port: [sys.executable, "-c", SLOW_HEALTH, str(port), str(health_s)]  # noqa: E731
    return ServerProcess.on_free_port(argv_on, start_timeout_s=60)


def test_the_first_request_after_the_router_started_is_routed():
    with _worker(1.5) as a, _worker(1.5) as b, sglang_router([a.url, b.url]) as router:
        wait_for_workers(router, 2, timeout_s=30)
        answers = [httpx.post(router.url + "/generate", json={"text": "x"}, timeout=10) for _ in range(4)]
        workers = httpx.get(router.url + "/workers", timeout=5).json()["workers"]
    assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
    assert sorted(w["url"] for w in workers if w["is_healthy"]) == sorted([a.url, b.url])


def test_a_router_that_never_registers_all_its_workers_is_one_line():
    with _worker(0.0) as a, sglang_router([a.url, "http://127.0.0.1:9"]) as router:
        with pytest.raises(ServerStartError, match=r"had 1 of its 2 workers registered and healthy after 3 s"):
            wait_for_workers(router, 2, timeout_s=3)
