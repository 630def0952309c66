"""Parity fixtures: reward servers started once per
session on free ports (the DisRMs they serve are in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


def _server(path: Path):
    from rlrm.launch.common.ports import free_port
    from rlrm.launch.fleet.process import ServerProcess, embedded_server_argv

    return ServerProcess(embedded_server_argv(str(path), "disrm", free_port(), extra=["--threads", "1"]))


@pytest.fixture(scope="session")
def spread_disrm_server(spread_disrm_path):
    """A served fp32 copy of the spread DisRM (tests pass its URL as a running reward server)."""
    with _server(spread_disrm_path) as server:
        yield server


@pytest.fixture(scope="session")
def random_disrm_server(random_disrm_path):
    with _server(random_disrm_path) as server:
        yield server
