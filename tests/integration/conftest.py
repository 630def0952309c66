"""Servers shared by the whole integration tier: each started once per session on a free port, on first use, and
stopped by its pid at the end. Tests only send them requests (none kills, reconfigures or counts on them); a test
that needs other flags, a kill or the server's own counters starts its own."""

from __future__ import annotations

from pathlib import Path

import pytest


def _embedded(path: Path, role: str):
    from rlrm.launch.fleet.process import ServerProcess, embedded_server_argv

    return ServerProcess.on_free_port(
        lambda port: embedded_server_argv(str(path), role, port, extra=["--threads", "1"])
    )


@pytest.fixture(scope="session")
def spread_disrm_server(spread_disrm_path):
    """A served fp32 copy of the spread DisRM (tests pass its URL as a running reward server)."""
    with _embedded(spread_disrm_path, "disrm") as server:
        yield server


@pytest.fixture(scope="session")
def random_disrm_server(random_disrm_path):
    """The random DisRM served as a `disrm` (`/classify`)."""
    with _embedded(random_disrm_path, "disrm") as server:
        yield server


@pytest.fixture(scope="session")
def tiny_genrm_server(tiny_policy_path):
    """The tiny policy served as a `genrm` judge (`/v1/chat/completions`, `/v1/completions`)."""
    with _embedded(tiny_policy_path, "genrm") as server:
        yield server
