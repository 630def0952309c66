"""A kept-alive connection the server closed while the client's loop was busy (a training step, a starved CPU)
still looks open to the client: a request sent on it fails before any answer. rlrm's HTTP clients send such a
request once more on a new connection (rlrm.launch.common.http.Sessions.send). Seen as a run that stopped with
"rollout request failed after 4 attempts; last: ... Can not write request body" on a loaded machine: every retry
took another of the connections the server had closed at the same time."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from rlrm.call_errors import TransientError
from rlrm.launch.client.balancer import ReplicaBalancer
from rlrm.launch.common import http


class ClosingServer:
    """Answers each request as HTTP/1.1 keep-alive (no `Connection: close`), then closes the connection 50 ms later,
    as a server's keep-alive timer does; counts connections and requests read."""

    def __init__(self):
        self.connections = self.requests = 0
        self.loop = asyncio.new_event_loop()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _start(self):
        return await asyncio.start_server(self._serve, sock=self.sock)

    async def _serve(self, reader, writer):
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            sizes = [line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
            await reader.readexactly(int(sizes[0]) if sizes else 0)
            self.requests += 1
            body = b'{"ok": true}'
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
            writer.write(body)
            await writer.drain()
            await asyncio.sleep(0.05)
        finally:
            writer.close()

    def close(self):
        if not self.thread.is_alive():
            return

        async def stop():
            self.server.close()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:  # connections the client left open
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.sock.close()  # a connection is refused now, as by a server that is gone


@pytest.fixture
def server():
    closing = ClosingServer()
    yield closing
    closing.close()


@pytest.mark.parametrize("in_flight", [1, 4])
def test_the_balancer_sends_again_what_met_a_connection_the_server_had_closed(server, in_flight):
    async def scenario():
        balancer = ReplicaBalancer([server.url])
        try:
            first = await asyncio.gather(*(balancer.post("/x", {"n": i}, 5) for i in range(in_flight)))
            time.sleep(0.5)  # the loop is busy while the server closes every connection: none of the closes is read
            second = await asyncio.gather(*(balancer.post("/x", {"n": i}, 5) for i in range(in_flight)))
            return first + second, dict(balancer.healthy)
        finally:
            await balancer.close()

    answers, healthy = asyncio.run(scenario())
    assert answers == [{"ok": True}] * 2 * in_flight and all(healthy.values())
    # the server read each request once: the second round's on new connections
    assert server.requests == 2 * in_flight and server.connections == 2 * in_flight


def test_forward_sends_again_what_met_a_connection_the_server_had_closed(server):
    async def scenario():
        balancer = ReplicaBalancer([server.url])
        try:
            first = await balancer.forward("POST", "/x", b'{"n": 1}', 5)
            time.sleep(0.5)
            second = await balancer.forward("POST", "/x", b'{"n": 2}', 5)
            return [first[:2], second[:2]]
        finally:
            await balancer.close()

    assert asyncio.run(scenario()) == [(200, b'{"ok": true}')] * 2
    assert server.requests == 2 and server.connections == 2


def test_the_synchronous_client_sends_again_what_met_a_connection_the_server_had_closed(server):
    first = http.post(server.url + "/x", {"n": 1}, timeout_s=5)
    loop = http._client().loop
    loop.call_soon_threadsafe(time.sleep, 0.5)  # its loop thread busy while the server closes the connection
    second = http.post(server.url + "/x", {"n": 2}, timeout_s=5)
    assert (first.status, first.json(), second.status, second.json()) == (200, {"ok": True}, 200, {"ok": True})
    assert server.requests == 2 and server.connections == 2


def test_a_server_that_is_gone_still_fails_at_once(server):
    async def scenario():
        balancer = ReplicaBalancer([server.url])
        try:
            await balancer.post("/x", {"n": 1}, 5)
            time.sleep(0.5)  # the server closes the connection, unread by the busy loop
            server.close()  # and is gone: the new connection of the second send is refused
            start = time.monotonic()
            with pytest.raises(TransientError, match="/x: Client"):
                await balancer.post("/x", {"n": 2}, 5)
            return time.monotonic() - start
        finally:
            await balancer.close()

    assert asyncio.run(scenario()) < 2.5  # no wait for the 5-s timeout
    assert server.requests == 1
