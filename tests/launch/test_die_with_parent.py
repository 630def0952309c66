"""A server process owned by a Ray actor dies with it: `ServerProcess(die_with_parent=True)` (Linux)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")

OWNER = """
import os, sys
from rlrm.launch.fleet.process import ServerProcess
server = ServerProcess([sys.executable, "-c", "import time; time.sleep(60)", "--port", "1"], die_with_parent={guard})
server.launch()
print(server.proc.pid, flush=True)
os._exit(0)  # as a killed Ray actor: no teardown runs
"""


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] in ("Z", "X"):  # dead, not yet reaped
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("guard", [True, False])
def test_the_server_dies_with_its_owner_only_when_asked(guard):
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-c", OWNER.format(guard=guard)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    pid = int(out.stdout.split()[0])
    try:
        assert _gone(pid, 10.0 if guard else 1.0) == guard  # without the guard it outlives its owner
    finally:
        if not guard:
            os.killpg(pid, 9)
