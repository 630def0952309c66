"""Where a server cannot listen, or a profile names servers that are not URLs: one clear line, before
any model loads."""

from __future__ import annotations

import socket
import subprocess
import sys

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
