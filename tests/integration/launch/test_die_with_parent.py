"""A server process dies with the process that launched it: `ServerProcess(die_with_parent=True)`, the
default (Linux), even when the launching thread is gone and the server started processes of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the guard uses Linux pidfds")

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


THREADED = """
import os, sys, threading, time
from rlrm.launch.fleet.process import ServerProcess
# the server starts a child of its own (as vLLM starts its engine core) and prints both pids
child = "import subprocess, sys, time; p = subprocess.Popen(['sleep', '60']); print(p.pid, flush=True); time.sleep(60)"
server = ServerProcess([sys.executable, "-c", child, "--port", "1"])
launcher = threading.Thread(target=server.launch)  # a worker thread that ends: PR_SET_PDEATHSIG would fire here
launcher.start()
launcher.join()
deadline = time.monotonic() + 30  # the child's first line, however slow the machine starts interpreters
while not open(server._log.name).read().split() and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(1.5)
print(server.proc.pid, int(server.alive()), open(server._log.name).read().split()[0], flush=True)
os._exit(0)
"""


def test_a_server_outlives_its_launching_thread_and_dies_with_its_children_when_the_owner_dies():
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-c", THREADED], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    pid, alive, grandchild = out.stdout.split()
    assert alive == "1"  # still running 1.5 s after the thread that launched it ended
    assert _gone(int(pid)) and _gone(int(grandchild))  # the owner's exit took the whole process group
