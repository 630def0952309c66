"""A server address whose port accepts connections and never answers (what an unreachable host looks like on
loopback) fails the start-up check within `start_timeout_s`, not after the per-request timeout."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from rlrm.launch.fleet.health import check_servers
from rlrm.launch.fleet.process import ServerStartError


def test_a_port_that_accepts_and_never_answers_is_refused_within_start_timeout_s():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes the handshakes; nobody ever reads or answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    try:
        start = time.monotonic()
        with pytest.raises(ServerStartError) as info:
            asyncio.run(
                check_servers(
                    [url], "genrm", None, None, timeout_s=1.0, request_timeout_s=60.0, what="reward.server.addresses"
                )
            )
        elapsed = time.monotonic() - start
    finally:
        silent.close()
    assert f"reward.server.addresses[0] {url} cannot serve the genrm reward: no answer in" in str(info.value)
    assert "reward.server.start_timeout_s" in str(info.value)
    # before: one probe waited the whole 60-s request timeout; now the 1-s start-up budget (plus one 1-s probe)
    assert elapsed < 60.0 / 4
