"""`rlrm launch server` refuses a host it cannot listen on in one line, before it starts anything."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.launch.common.ports import free_port

HOSTS = "bind 127.0.0.1 (this machine only), 0.0.0.0 (every interface) or one of this machine's own addresses"


def _launch(*args: str):
    return CliRunner().invoke(app, ["launch", "server", "--model", "tiny:policy", *args])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "error: --port 70000 is not a TCP port; use one in 1-65535"),
        (["--port", "-1"], "error: --port -1 is not a TCP port; use one in 1-65535"),
        # TEST-NET-1 (RFC 5737): an address no machine here has
        (
            ["--host", "192.0.2.1", "--port", "{free}"],
            f"error: --host 192.0.2.1 is not an address of this machine; {HOSTS}",
        ),
        (
            ["--host", "no-such-host.invalid", "--port", "{free}"],
            "error: --host no-such-host.invalid does not resolve to an address",
        ),
        (["--backend", "vllm", "--port", "0", "--dry-run"], "error: --port 0 is not a TCP port; use one in 1-65535"),
    ],
)
def test_launch_server_refuses_what_it_cannot_listen_on_in_one_line(args, message):
    result = _launch(*[a.replace("{free}", str(free_port())) for a in args])
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1 and result.output.startswith(message), result.output
