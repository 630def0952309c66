"""A launched replica whose process has exited is not waited for: the readiness check names it at once.

vLLM answers /health, then dies at its first forward (an attention it cannot run): before, the first request was
retried against the closed port until its deadline (60 s) before the fleet looked at the process."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from rlrm.launch.fleet.health import check_servers
from rlrm.launch.fleet.process import ServerStartError


@pytest.fixture
def closed_port():
    """A port nothing listens on, held bound so that no other test's server can listen there meanwhile."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def _check(url: str, alive, timeout_s: float) -> tuple[str, float]:
    start = time.monotonic()
    with pytest.raises(ServerStartError) as err:
        asyncio.run(check_servers([url], "disrm", None, "m", timeout_s, 2.0, "reward.server replica", alive=alive))
    return str(err.value), time.monotonic() - start


def test_a_replica_whose_process_exited_fails_the_check_at_once(closed_port):
    url = f"http://127.0.0.1:{closed_port}"
    message, elapsed = _check(url, alive=lambda u: u != url, timeout_s=20)
    assert "its process has exited" in message and url in message and "\n" not in message
    assert elapsed < 20 / 4  # the first refused connection ends it, not the 20-s deadline


def test_a_replica_still_running_is_retried_until_its_deadline(closed_port):
    url = f"http://127.0.0.1:{closed_port}"
    message, elapsed = _check(url, alive=lambda u: True, timeout_s=2)
    assert "still after 2 s" in message and "exited" not in message
    assert elapsed >= 2
