"""rlrm's HTTP client for code that is not a coroutine: aiohttp, run on one background event loop per process.

    from rlrm.launch.common import http
    answer = http.post(url + "/update_weights_from_disk", {"model_path": path}, headers=auth, timeout_s=60)
    answer.status, answer.json()

rlrm talks HTTP with one client library, aiohttp: the reward balancer and the start checks await it on their own
loop (`rlrm/launch/client/balancer.py`, `rlrm/launch/fleet/health.py`), and the synchronous callers (the
supervisor's readiness poll, weight-sync calls from a thread pool, the router's metrics page, the replicas'
model info) call `get` / `post` here. Each call is handed to one event loop that a daemon thread runs, started on
first use, holding one keep-alive ClientSession, and the calling thread waits for the answer. That works from any
thread, a thread whose own loop is running included (the call blocks that loop, as any blocking call does).

Any HTTP status is an answer, not an error. A call that gets no answer raises rlrm.call_errors types naming the
URL: RequestTimeout (nothing within `timeout_s`), TransientError (refused, reset, DNS: worth another try). A
forked child starts its own loop on its first call; the loop's connections are closed at interpreter exit.
Try it: `python benchmarks/http_client_sync.py` (per-call cost against a local server).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import json
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlrm.call_errors import RequestTimeout, TransientError
from rlrm.launch.common.no_proxy import proxy_for

if TYPE_CHECKING:
    import aiohttp

# Idle connections are reused for at most this long: less than the 5 s after which uvicorn-based servers
# (vLLM, SGLang) close them. A run's event loop is busy between reward phases, so the client may not have
# read a server's close yet when it reuses the connection: every such request failed ("Server disconnected")
# and was retried, all at once after each idle gap (measured: bursts of 38-256 retries on a tiny-disrm run).
KEEPALIVE_S = 4.0

# The loop thread enforces `timeout_s` itself; the caller waits this much longer before giving up on the loop.
_GRACE_S = 5.0


@dataclass(frozen=True)
class Reply:
    """One answer as `Sessions.send` read it."""

    status: int
    body: bytes
    headers: Any  # the response's headers (aiohttp's case-insensitive mapping)
    content_type: str


class Sessions:
    """The ClientSessions of one event loop, made there on first use: `pooled`, whose connections are kept alive for
    KEEPALIVE_S (no cap on them: the callers bound how many requests are in flight), and, made on first need, one
    that keeps none, for a request `send` sends again."""

    def __init__(self) -> None:
        self._pooled: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None
        self.closed = False

    @property
    def pooled(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._pooled is None:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)
            self._pooled = aiohttp.ClientSession(connector=connector)
        return self._pooled

    async def send(self, method: str, url: str, **kwargs: Any) -> Reply:
        """Send one request on `pooled` and read the whole answer; aiohttp's errors propagate.

        A connection the server closed while this process's loop was busy (it ran for seconds without reading the
        close) still looks open: a request sent on it fails before any answer, with "Server disconnected" or "Can
        not write request body", and so do the requests on the other connections closed at the same time. Such a
        request is sent once more at once on a new connection: a server that closed an idle connection never read
        it, and a server that died refuses the new connection. A second failure, a refused connection, or a request
        cut off by `close()` is the caller's to handle.
        """
        import aiohttp

        try:
            return await _read(self.pooled, method, url, kwargs)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            if isinstance(exc, aiohttp.ClientConnectorError) or self.closed:  # no server there; or closed here
                raise
        if self._fresh is None:
            self._fresh = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True))
        return await _read(self._fresh, method, url, kwargs)

    async def close(self) -> None:
        self.closed = True
        for made in (self._pooled, self._fresh):
            if made is not None:
                await made.close()
        self._pooled = self._fresh = None


async def _read(client: aiohttp.ClientSession, method: str, url: str, kwargs: dict[str, Any]) -> Reply:
    # a hosted judge through the shell's HTTP proxy, as the user's other tools reach it; rlrm's own servers direct
    async with client.request(method, url, proxy=proxy_for(url), **kwargs) as resp:
        return Reply(resp.status, await resp.read(), resp.headers, resp.content_type)


@dataclass(frozen=True)
class Answer:
    """What a server answered: its status and body (decoded as UTF-8, undecodable bytes replaced)."""

    url: str
    status: int
    text: str

    def json(self) -> Any:
        """The body as JSON; ValueError naming the URL when it is not JSON."""
        try:
            return json.loads(self.text)
        except ValueError:
            raise ValueError(f"{self.url} answered {self.status} with no JSON: {self.text[:120]!r}") from None


def get(url: str, *, headers: dict[str, str] | None = None, timeout_s: float) -> Answer:
    """GET `url` and wait for the answer; raises RequestTimeout or TransientError when none comes."""
    return _client().call("GET", url, None, headers, timeout_s)


def post(url: str, body: dict[str, Any], *, headers: dict[str, str] | None = None, timeout_s: float) -> Answer:
    """POST `body` as JSON to `url` and wait for the answer; raises RequestTimeout or TransientError when none comes."""
    return _client().call("POST", url, body, headers, timeout_s)


class _LoopClient:
    """One event loop on a daemon thread and the ClientSession that lives on it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rlrm-http", daemon=True)
        self.thread.start()
        self.sessions = Sessions()  # used on the loop thread only

    def call(
        self, method: str, url: str, body: dict[str, Any] | None, headers: dict[str, str] | None, timeout_s: float
    ) -> Answer:
        if threading.current_thread() is self.thread:
            raise RuntimeError("a synchronous HTTP call on rlrm's HTTP loop itself would wait for itself: await it")
        future = asyncio.run_coroutine_threadsafe(self._request(method, url, body, headers, timeout_s), self.loop)
        try:
            return future.result(timeout_s + _GRACE_S)
        except concurrent.futures.TimeoutError:  # the loop thread is stuck: the caller still gets its timeout
            future.cancel()
            raise RequestTimeout(f"{method} {url} did not answer within {timeout_s:g} s") from None

    async def _request(
        self, method: str, url: str, body: dict[str, Any] | None, headers: dict[str, str] | None, timeout_s: float
    ) -> Answer:
        import aiohttp

        try:
            timeout = aiohttp.ClientTimeout(total=timeout_s)
            reply = await self.sessions.send(method, url, json=body, headers=headers, timeout=timeout)
            return Answer(url, reply.status, reply.body.decode("utf-8", "replace"))
        except asyncio.TimeoutError:  # before ClientError: aiohttp's ServerTimeoutError is both
            raise RequestTimeout(f"{method} {url} did not answer within {timeout_s:g} s") from None
        except aiohttp.ClientError as exc:
            raise TransientError(f"{method} {url}: {type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        """Close the session's connections and stop the loop (a no-op in a forked child: they are the parent's)."""
        if self.pid != os.getpid() or not self.thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self.sessions.close(), self.loop).result(_GRACE_S)
        except Exception:  # noqa: BLE001 - at exit a connection that fails to close is closed by the OS
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(_GRACE_S)
        if not self.thread.is_alive():
            self.loop.close()


_lock = threading.Lock()
_current: _LoopClient | None = None
_hooked = False
_inherited: list[_LoopClient] = []  # a forked child's copy of its parent's client: see _forget


def _client() -> _LoopClient:
    """The process's loop client, started on first use (again in a forked child: threads do not survive a fork)."""
    global _current, _hooked
    client = _current
    if client is not None and client.pid == os.getpid():
        return client
    with _lock:
        if not _hooked:  # registered on first use, not at import
            atexit.register(close)
            os.register_at_fork(after_in_child=_forget)
            _hooked = True
        if _current is None or _current.pid != os.getpid():
            _current = _LoopClient()
        return _current


def _forget() -> None:
    """In a forked child: the loop thread and its connections are the parent's; a lock held there is held forever.

    The parent's client is kept, never collected: collecting it would close its connections' transports, which
    unregisters their sockets from the epoll instance the child shares with the parent, and the parent's loop
    would then wait forever for answers on them (seen: a parent's next call timed out after a child ran).
    """
    global _current, _lock
    if _current is not None:
        _inherited.append(_current)
    _current, _lock = None, threading.Lock()


def close() -> None:
    """Close the connections and stop the loop thread; the next call starts a new one. Runs at interpreter exit."""
    global _current
    with _lock:
        client, _current = _current, None
    if client is not None:
        client.close()
