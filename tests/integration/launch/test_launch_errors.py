"""Where a server cannot listen, or a profile names servers that are not URLs: one clear line, before
any model loads."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from rlrm.cli.main import app
from tests.unit.launch.test_launch_errors import _launch


def test_a_port_in_use_is_told_apart_from_a_foreign_host():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _launch("--port", str(port))
    assert (
        result.exit_code == 1
        and result.output.strip() == f"error: port {port} on 127.0.0.1 is in use; pick another with --port"
    )


def test_the_module_entry_point_says_the_same():
    out = subprocess.run(
        [sys.executable, "-m", "rlrm.launch.server", "--model", "tiny:policy", "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1 and out.stderr.strip() == "error: --port 70000 is not a TCP port; use one in 1-65535"


@pytest.mark.parametrize(
    ("addresses", "entry"),
    [
        ('["not a url"]', "entry 0 ('not a url')"),
        ('["http://127.0.0.1:8000", "127.0.0.1:8001"]', "entry 1 ('127.0.0.1:8001')"),
        ('["http://127.0.0.1:99999"]', "entry 0 ('http://127.0.0.1:99999')"),
        ('["ftp://h:1"]', "entry 0 ('ftp://h:1')"),
    ],
)
def test_reward_server_addresses_must_be_urls(addresses, entry):
    result = CliRunner().invoke(
        app, ["train", "--profile", "tiny-disrm", "--set", f"reward.server.addresses={addresses}", "--dry-run"]
    )
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert f"reward.server.addresses: {entry} is not an http(s) URL of a server" in result.output, result.output


def test_one_address_may_be_given_as_a_string():
    result = CliRunner().invoke(
        app, ["train", "--profile", "tiny-disrm", "--set", "reward.server.addresses=http://127.0.0.1:8000", "--dry-run"]
    )
    assert result.exit_code == 0 and "- http://127.0.0.1:8000" in result.output
