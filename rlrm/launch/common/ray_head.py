"""Is a Ray head answering at an address? Asked before `ray.init`, which on an address where nothing answers
waits minutes (a GCS address: it retried for over 200 s here before we gave up; Ray Client: 30 s) and then
ends in a traceback or a process exit.

    check_ray_head("10.0.0.5:6379", "actor.ray_address")   # RayHeadUnreachable: one line naming the setting

How: Ray's head (the GCS at host:port) and its Ray Client server (ray://host:port) both speak gRPC, i.e.
HTTP/2. The check connects, sends the HTTP/2 client preface and an empty SETTINGS frame, and waits for the
server's first frame, which an HTTP/2 server sends at once: a SETTINGS frame (type 4). No connection, no
answer within the bound, or an answer that is not HTTP/2 each get their own line. "auto", "local" and None
name no remote head and are not checked.
"""

from __future__ import annotations

import socket
import time

from rlrm.errors import ConfigError

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + empty SETTINGS
_SETTINGS = 4  # HTTP/2 frame type, the 4th byte of a frame header


class RayHeadUnreachable(ConfigError):
    """No Ray head answers at the address a setting names."""


def check_ray_head(address: str | None, setting: str, timeout_s: float = 10.0) -> None:
    """Return when a gRPC server answers at `address`; RayHeadUnreachable naming `setting` otherwise."""
    if address is None or address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    what = (
        "a Ray Client server (ray start --head runs one on port 10001)"
        if address.startswith("ray://")
        else ("a Ray head (ray start --head --port=PORT)")
    )
    fix = f"check that {what} runs there and that this machine can reach that port, or unset {setting} for a local Ray"
    deadline = time.monotonic() + timeout_s
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
            sock.sendall(_PREFACE)
            first = _read_frame_header(sock, deadline)
    except socket.timeout:
        raise RayHeadUnreachable(f"{setting}={address}: no answer within {timeout_s:g} s; {fix}") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise RayHeadUnreachable(f"{setting}={address}: cannot connect ({reason}); {fix}") from None
    if len(first) < 9 or first[3] != _SETTINGS:
        said = "closed the connection" if not first else f"answered {first[:16]!r}"
        raise RayHeadUnreachable(f"{setting}={address}: the server there {said}, which is not Ray (gRPC); {fix}")


def _read_frame_header(sock: socket.socket, deadline: float) -> bytes:
    """Up to the 9 bytes of the server's first HTTP/2 frame header (fewer when it closes first)."""
    got = b""
    while len(got) < 9:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout
        sock.settimeout(left)
        chunk = sock.recv(9 - len(got))
        if not chunk:
            break
        got += chunk
    return got
