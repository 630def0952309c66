"""Ports: find a free one, and fail early with a clear message when one cannot be listened on."""

from __future__ import annotations

import errno
import socket
import sys
from collections.abc import Callable

from rlrm.errors import RlrmError


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free right now on `host` (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def on_fresh_ports(start_on: Callable[[int], None], what: str, tries: int = 3) -> None:
    """`start_on(port)` on a port free now; again on a fresh one when it failed because another process took the
    port before `what` bound it (EADDRINUSE in its error: torch's rendezvous), at most `tries` times in all."""
    for attempt in range(tries):
        port = free_port()
        try:
            return start_on(port)
        except Exception as exc:  # noqa: BLE001 - judged by its text: a rank's error comes back as one
            if "EADDRINUSE" not in str(exc) or attempt == tries - 1:
                raise
            print(
                f"rlrm: another process took port {port} before {what} bound it; starting them again on a fresh one",
                file=sys.stderr,
                flush=True,
            )


def port_taken(host: str, port: int) -> bool:
    """Whether something listens on host:port now (a connect succeeds)."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def check_port(port: int) -> None:
    """Raise an RlrmError unless `port` is a TCP port number (the socket layer would wrap 70000 to 4464)."""
    if not 1 <= port <= 65535:
        raise RlrmError(f"--port {port} is not a TCP port; use one in 1-65535")


def ensure_port_free(host: str, port: int) -> None:
    """Raise an RlrmError that says why `host:port` cannot be listened on: the port is taken, the host is
    not an address of this machine (or does not resolve), or the port needs privileges."""
    bind_port(host, port, listen=False).close()


BACKLOG = 2048  # uvicorn's, which listens again on the socket it is given


def bind_port(host: str, port: int, listen: bool = True) -> socket.socket:
    """A socket bound to `host:port` and listening, for a server to serve on later (as vLLM binds before its engine
    starts): held while the model loads, no free port another process asks the OS for is this one. It listens at
    once because SO_REUSEADDR (kept, so a server restarted on its port is not refused for TIME_WAIT) lets a second
    socket bind a port no socket listens on yet: two servers handed the same free port would both bind it, and the
    one that listened second would fail only after its model loaded, while its launcher read the other's /health.
    Connections made before the server serves wait in the backlog (a readiness probe times out and asks again).
    An RlrmError, as `ensure_port_free` words it, where it cannot be bound (`listen=False`: only that check)."""
    check_port(port)
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise RlrmError(f"--host {host} does not resolve to an address ({exc.strerror}); {_HOSTS}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        if listen:
            sock.listen(BACKLOG)
        return sock
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise RlrmError(f"port {port} on {host} is in use; pick another with --port") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise RlrmError(f"--host {host} is not an address of this machine; {_HOSTS}") from None
        if exc.errno == errno.EACCES:
            raise RlrmError(
                f"port {port} needs administrator rights to listen on; pick one above 1023 with --port"
            ) from None
        raise RlrmError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


_HOSTS = "bind 127.0.0.1 (this machine only), 0.0.0.0 (every interface) or one of this machine's own addresses"
