"""rlrm's synchronous HTTP calls (rlrm/launch/common/http.py) against a real aiohttp server on a free loopback port:
from plain threads, from a thread whose event loop is running, 50 at once, after a fork; timeouts and refused
ports as rlrm.call_errors types; and that rlrm imports no other HTTP client.

    PYTHONPATH=$PWD python -m pytest -q tests/integration/launch/test_http.py
"""

from __future__ import annotations

import ast
import asyncio
import json
import multiprocessing
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from held_ports import refused_port  # tests/fixtures/held_ports.py
from threaded_app import ThreadedApp

from rlrm.call_errors import RequestTimeout, TransientError
from rlrm.launch.client.wire import SGLangWire, post_sync_call
from rlrm.launch.common import http
from rlrm.launch.fleet.router import RouterCounters

REPO = Path(__file__).resolve().parents[3]
SLOW_S = 3.0  # how long /slow takes to answer


class TinyServer(ThreadedApp):
    """/json, /text (not JSON), /slow (also POST), POST /echo (the body and the Authorization header back), /metrics."""

    def __init__(self):
        super().__init__()
        self.peers: list[int] = []  # the client port of each request: one port for two requests = a reused connection
        self.metrics = "smg_worker_retries_total 3\n"
        self.metrics_status = 200

    def routes(self, app) -> None:
        from aiohttp import web

        async def answer_json(request):
            self.peers.append(request.transport.get_extra_info("peername")[1])
            return web.json_response({"ok": True})

        async def text(request):
            return web.Response(text="<html>a gateway page</html>", status=502)

        async def slow(request):
            await asyncio.sleep(SLOW_S)
            return web.json_response({"late": True})

        async def echo(request):
            return web.json_response({"body": await request.json(), "auth": request.headers.get("Authorization")})

        async def metrics(request):
            return web.Response(text=self.metrics, status=self.metrics_status)

        for path, handler in (("/json", answer_json), ("/text", text), ("/slow", slow), ("/metrics", metrics)):
            app.router.add_get(path, handler)
        app.router.add_post("/echo", echo)
        app.router.add_post("/slow", slow)


@pytest.fixture(scope="module")
def server():
    with TinyServer() as running:
        yield running


def _in_thread(fn):
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("value", fn()))
    thread.start()
    thread.join(30)
    return out["value"]


def test_a_plain_thread_gets_answers_and_reuses_its_connection(server):
    answer = _in_thread(lambda: http.get(server.url + "/json", timeout_s=5))
    assert (answer.status, answer.json()) == (200, {"ok": True})
    body = {"ids": [1, 2, 3], "name": "é"}
    echoed = http.post(server.url + "/echo", body, headers={"Authorization": "Bearer k"}, timeout_s=5).json()
    assert echoed == {"body": body, "auth": "Bearer k"}
    before = len(server.peers)
    http.get(server.url + "/json", timeout_s=5)
    http.get(server.url + "/json", timeout_s=5)
    assert len(set(server.peers[before:])) == 1  # keep-alive: the second call rode the first one's connection


def test_a_thread_whose_loop_is_running_can_call(server):
    async def inside_a_loop():
        ticks = asyncio.create_task(asyncio.sleep(0))  # this loop has other work; the call blocks it, as sync calls do
        answer = http.get(server.url + "/json", timeout_s=5)
        await ticks
        return answer.json()

    assert asyncio.run(inside_a_loop()) == {"ok": True}
    assert _in_thread(lambda: asyncio.run(inside_a_loop())) == {"ok": True}


def test_no_answer_within_the_timeout_is_a_request_timeout_naming_the_url(server):
    t0 = time.monotonic()
    with pytest.raises(RequestTimeout, match=rf"GET {server.url}/slow did not answer within 0.3 s"):
        http.get(server.url + "/slow", timeout_s=0.3)
    assert time.monotonic() - t0 < SLOW_S  # it gave up at its timeout, not when the server answered


def test_a_refused_port_is_a_transient_error_naming_the_url():
    with socket.socket() as held:  # bound, never listening: no other test's server can take the port meanwhile
        held.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{held.getsockname()[1]}/health"
        with pytest.raises(TransientError, match=rf"GET {url}: ClientConnectorError") as caught:
            http.get(url, timeout_s=5)
    assert not isinstance(caught.value, RequestTimeout)


def test_any_status_is_an_answer_and_a_body_not_json_is_a_value_error_naming_the_url(server):
    answer = http.get(server.url + "/text", timeout_s=5)
    assert (answer.status, answer.text) == (502, "<html>a gateway page</html>")
    with pytest.raises(ValueError, match=rf"{server.url}/text answered 502 with no JSON: '<html>a gateway"):
        answer.json()
    assert http.get(server.url + "/missing", timeout_s=5).status == 404


def test_fifty_threads_calling_at_once_each_get_their_own_answer(server):
    def call(i: int):
        return http.post(server.url + "/echo", {"i": i}, timeout_s=30).json()["body"]["i"]

    with ThreadPoolExecutor(max_workers=50) as pool:
        assert list(pool.map(call, range(50))) == list(range(50))
    with ThreadPoolExecutor(max_workers=50) as pool:  # a second wave over the pooled connections
        assert sorted(pool.map(call, range(50, 100))) == list(range(50, 100))


def _child_call(url: str, results) -> None:
    results.put(http.get(url, timeout_s=5).json())


def test_a_forked_child_makes_its_own_calls(server):
    http.get(server.url + "/json", timeout_s=5)  # the parent's loop thread is running when it forks
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    child = ctx.Process(target=_child_call, args=(server.url + "/json", results))
    child.start()
    assert results.get(timeout=30) == {"ok": True}
    child.join(30)
    assert child.exitcode == 0
    assert http.get(server.url + "/json", timeout_s=5).status == 200  # the parent's client still works


def test_close_stops_the_loop_thread_and_the_next_call_starts_another(server):
    http.get(server.url + "/json", timeout_s=5)
    thread = http._current.thread
    http.close()
    assert not thread.is_alive()
    assert http.get(server.url + "/json", timeout_s=5).status == 200


def test_router_counters_read_the_metrics_page_through_it(server):
    counters = RouterCounters(server.url + "/metrics", prefix="rollout/")
    assert counters.take() == {"rollout/router_retries": 3.0, "rollout/router_errors": 0.0}
    server.metrics = "smg_worker_retries_total 5\n"
    assert counters.take()["rollout/router_retries"] == 2.0
    server.metrics_status = 500
    assert counters.take() == {}  # an error page is not read as zero counters
    server.metrics_status = 200
    with refused_port() as port:  # nothing listens there, and no other test's server can meanwhile
        assert RouterCounters(f"http://127.0.0.1:{port}/metrics", prefix="x/").take() == {}


def test_weight_sync_calls_fail_as_call_errors_or_a_line(server):
    """What the rollout engine and the weight broadcast catch: no answer raises, any answer is judged by the wire."""
    wire = SGLangWire()
    with refused_port() as port:  # nothing listens there, and no other test's server can meanwhile
        refused = f"http://127.0.0.1:{port}"
        with pytest.raises(TransientError, match=rf"POST {refused}/update_weights_from_disk: ClientConnectorError"):
            post_sync_call(refused, "/update_weights_from_disk", {}, wire, None, 5)
    with pytest.raises(RequestTimeout, match=rf"POST {server.url}/slow did not answer within 0.2 s"):
        post_sync_call(server.url, "/slow", {}, wire, None, 0.2)
    assert post_sync_call(server.url, "/text", {}, wire, None, 5) == "POST /text answered 405: 405: Method Not Allowed"
    assert post_sync_call(server.url, "/echo", {"x": 1}, wire, "k", 5) == "success: false"  # JSON, read by the wire


def test_rlrm_imports_no_other_http_client():
    """aiohttp is rlrm's one client library; only these modules import it (model_proxy as a server). no_proxy.py
    reads the shell's proxy variables with urllib.request's readers, as requests and aiohttp do: it sends nothing."""
    allowed = {
        "rlrm/launch/common/http.py": {"aiohttp"},
        "rlrm/launch/client/balancer.py": {"aiohttp"},
        "rlrm/launch/fleet/health.py": {"aiohttp"},
        "rlrm/engine/rewards/model_proxy.py": {"aiohttp"},
        "rlrm/launch/common/no_proxy.py": {"urllib"},
    }
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / "rlrm").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                if name.split(".")[0] in ("aiohttp", "httpx", "requests", "urllib3") or name in (
                    "urllib.request",
                    "http.client",
                ):
                    found.setdefault(path.relative_to(REPO).as_posix(), set()).add(name.split(".")[0])
    assert {p: n for p, n in found.items() if allowed.get(p) != n} == {}, json.dumps(
        {p: sorted(n) for p, n in found.items()}
    )
