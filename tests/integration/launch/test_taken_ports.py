"""A port another process listens on is refused before an engine is looked for or started, in one line naming the
port and what to change (issue 35: vLLM used to start and report "not healthy" 51 s later, no word of the port)."""

from __future__ import annotations

import asyncio
import socket

import pytest
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.errors import ConfigError
from rlrm.launch.fleet.server_fleet import ServerFleet
from rlrm.launch.fleet.spec import FleetSpec


def _listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_launch_server_refuses_a_taken_port_before_the_engine_lookup():
    """Without vLLM here, the engine lookup's error used to hide the port; with it, vLLM used to start."""
    with _listening() as taken:
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            app, ["launch", "server", "--model", "tiny:policy", "--backend", "vllm", "--port", str(port)]
        )
    assert result.exit_code == 1, result.output
    assert result.output.strip() == f"error: port {port} on 127.0.0.1 is in use; pick another with --port"


# the id is not "vllm": that keyword marks the tests that need the real engine (tests/conftest.py)
@pytest.mark.parametrize("backend", ["embedded", "vllm"], ids=["embedded", "vllm-argv"])
def test_a_taken_port_in_extra_args_is_refused_before_anything_starts(backend):
    """`--port` in extra_args wins over the replica's own free port (the last flag wins): the engine would fail on
    the taken port while rlrm waits on its own one until start_timeout_s."""
    with _listening() as taken:
        port = taken.getsockname()[1]
        spec = FleetSpec(section="rollout.server", backend=backend, extra_args=("--port", str(port)), router="client")
        fleet = ServerFleet(spec, role="policy", model_path="unused")
        message = (
            f"rollout.server.extra_args sets --port {port} (in use by another process): rlrm starts every replica on "
            "a free port of its own and waits for it there; remove --port from rollout.server.extra_args"
        )
        with pytest.raises(ConfigError) as refused:
            fleet.argvs()  # what `rlrm train --dry-run` prints
        assert str(refused.value) == message
        if backend == "embedded":  # vLLM is not installed everywhere: its start would stop at the engine lookup
            with pytest.raises(ConfigError) as refused:
                asyncio.run(fleet.start())
            assert str(refused.value) == message and fleet.pool is None  # no replica was launched
