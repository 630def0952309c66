"""The address a custom reward function is given to call the reward model: a loopback forwarder in the
trainer (or Ray worker) process, one port per sample being scored.

    proxy = ModelProxy(metered, timeout_s=30)
    async with proxy.lease() as address:     # "127.0.0.1:PORT", verl's form (no scheme)
        await user_fn(..., reward_router_address=address)
    await proxy.close()

Why a forwarder and not the SGLang router's own address: the router forwards `/v1/chat/completions`,
`/v1/completions` and `/generate`, answers `/v1/models` itself, but does not route `/classify`
(rlrm/launch/fleet/router.py), and a hosted API has neither. The forwarder answers every path the reward
servers serve by sending it on through rlrm's balancer (the router when one is in front, else the least busy
replica), with the servers' bearer key added (the function never needs it), under the run's rate limits
(rlrm/engine/rewards/metered.py). Why one port per sample: a function's HTTP client carries nothing that
names the sample, and the port does; so each call lands in that sample's ledger (counts, tokens, trace
spans). Ports are reused: a sample leases a free one and gives it back when its reward ends.

Only the run's own user may call it (the owner of the calling socket, from /proc/net/tcp; another is answered 403):
the forwarder puts the servers' key on what it sends on, which no other user of the machine may use.

A call that got no answer (timeout, connection error) is answered 502 to the function, and counted, so
a function that raises on it is retried as a transient failure (rlrm/engine/rewards/custom.py); a path the
servers do not serve answers their 404, counted and named once.

A JSON answer always says `Content-Type: application/json`, and an error that came with no body or plain text
gets an OpenAI-style JSON one: the SGLang router answers its own `/v1/models` as `text/plain` and its 404s with no
body, and clients that check the type (aiohttp's `json()`, the openai SDK) refuse those. Other answers (an SSE
stream, `/health`'s plain "OK", an HTML page) pass with the type they came with. A stream (`"stream": true`) is
passed on once it is complete, under `reward.server.request_timeout_s` as a whole; its `usage` (in its last chunk,
with `stream_options.include_usage`) is counted.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rlrm.call_errors import CallError
from rlrm.engine.rewards.ledger import CallLedger, current_ledger
from rlrm.engine.rewards.metered import MeteredBalancer
from rlrm.launch.common.no_proxy import direct_loopback

if TYPE_CHECKING:
    from aiohttp import web


class ModelProxy:
    def __init__(self, metered: MeteredBalancer, timeout_s: float, host: str = "127.0.0.1"):
        self.metered, self.timeout_s, self.host = metered, timeout_s, host
        # the function's client (requests, httpx, the openai SDK) reads NO_PROXY: the address handed out is loopback,
        # which a shell's HTTP_PROXY would catch; worker processes started after this inherit it
        direct_loopback(os.environ)
        self._runner: web.AppRunner | None = None
        self._free: list[int] = []
        self._ledgers: dict[int, CallLedger] = {}  # port -> the ledger of the sample holding it
        self._missing_said: set[str] = set()

    @asynccontextmanager
    async def lease(self):
        """`host:port` for the duration of one sample's reward; its calls land in the sample's ledger."""
        port = self._free.pop() if self._free else await self._open_port()
        self._ledgers[port] = current_ledger()
        try:
            yield f"{self.host}:{port}"
        finally:
            self._ledgers[port] = CallLedger()  # a call that outlives its sample is not counted against the next
            self._free.append(port)

    async def _open_port(self) -> int:
        from aiohttp import web

        if self._runner is None:
            app = web.Application(client_max_size=64 * 1024**2)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        await web.SockSite(self._runner, sock).start()
        return sock.getsockname()[1]

    async def _handle(self, request):
        from aiohttp import web

        port = request.transport.get_extra_info("sockname")[1]
        transport = request.transport
        if not caller_is_this_user(transport.get_extra_info("peername"), transport.get_extra_info("sockname")):
            return web.json_response(  # the servers' key goes on every request sent on: not for other users
                {"error": {"message": "rlrm reward forwarder: only the run's own user may call it", "code": 403}},
                status=403,
            )
        ledger = self._ledgers.get(port) or CallLedger()
        data = await request.read()
        try:
            status, body, ctype = await self.metered.forward(
                request.method, request.path_qs, data, self.timeout_s, ledger
            )
        except CallError as exc:
            message = f"rlrm reward forwarder: {exc}"
            return web.json_response({"error": {"message": message, "type": "upstream"}}, status=502)
        if status == 404 and request.path not in self._missing_said:
            self._missing_said.add(request.path)
            print(
                f"rlrm: the reward function called {request.method} {request.path}, which the reward servers answer "
                "404 (counted in reward/model_not_found)",
                file=sys.stderr,
                flush=True,
            )
        body, ctype = typed_answer(status, body, ctype, f"{request.method} {request.path}")
        return web.Response(status=status, body=body, headers={"Content-Type": ctype})  # its charset too

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def caller_is_this_user(peer, own) -> bool:
    """Whether the loopback TCP connection from `peer` to `own` (each (host, port)) was opened by a socket of this
    process's user: the owner (uid) of the kernel's row for that socket in /proc/net/tcp, local address `peer`,
    remote `own`, not TIME_WAIT (whose rows say uid 0). A loopback TCP connection carries no credentials of its
    own (no SO_PEERCRED). Where the table cannot be read (not Linux), True: the forwarder listens on loopback only."""
    try:
        table = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return True
    for line in table:
        fields = line.split()
        if fields[3] != "06" and _address(fields[1]) == tuple(peer[:2]) and _address(fields[2]) == tuple(own[:2]):
            return int(fields[7]) == os.getuid()
    return False


def _address(field: str) -> tuple[str, int]:
    """("127.0.0.1", 8000) from /proc/net/tcp's "0100007F:1F40" (the IPv4 address little-endian, the port big)."""
    host, _, port = field.partition(":")
    return socket.inet_ntoa(bytes.fromhex(host)[::-1]), int(port, 16)


# What an upstream says of a body it did not type (a missing header reads as octet-stream in aiohttp)
_UNTYPED = ("text/plain", "application/octet-stream", "")


def typed_answer(status: int, body: bytes, ctype: str, call: str) -> tuple[bytes, str]:
    """The body and Content-Type (parameters such as the charset kept) to answer a custom function's `call` with.

    An untyped JSON body is typed `application/json`; an error without a JSON body gets an OpenAI-style one
    carrying the upstream's text; everything else passes as it came.
    """
    if ctype.split(";")[0].strip().lower() not in _UNTYPED:
        return body, ctype
    if _is_json(body):
        return body, "application/json"
    if status < 400:
        return body, ctype or "text/plain"
    said = body.decode("utf-8", "replace").strip()[:500]
    message = f"the reward servers answered {status} to {call}" + (f": {said}" if said else "")
    kind = "server_error" if status >= 500 else "invalid_request_error"
    error = {"error": {"message": message, "type": kind, "code": status}}
    return json.dumps(error).encode(), "application/json"


def _is_json(body: bytes) -> bool:
    """Whether `body` is a JSON object or array (a bare "OK" or number is left as text)."""
    if body.lstrip()[:1] not in (b"{", b"["):
        return False
    try:
        json.loads(body)
    except ValueError:
        return False
    return True
