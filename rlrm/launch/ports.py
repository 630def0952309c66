"""Ports: find a free one, and fail early with a clear message when one is taken."""

from __future__ import annotations

import socket

from rlrm.errors import RlrmError


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free right now on `host` (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def ensure_port_free(host: str, port: int) -> None:
    """Raise an RlrmError naming the port when something already listens there."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            raise RlrmError(f"port {port} on {host} is in use; pick another with --port") from None
