"""A server's process group is signalled only while its leader is unreaped.

`killpg(pid)` is safe while the leader is a zombie: its pid, the group's number, cannot be handed out again.
ServerProcess used to reap the leader as soon as it looked (`poll()` in `alive()`), then `stop()` at the end of the
run SIGKILLed group `pid`: once the group was empty, whoever had been given that number since (any session leader:
a shell, another user's server)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from held_ports import reserved_port

from rlrm.launch.fleet.process import ServerProcess


def _state(pid: int) -> str | None:
    """The process's state letter (Z: a zombie, exited and not reaped), None when the pid is free."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def _exited_server(code: int) -> ServerProcess:
    with reserved_port() as port:
        server = ServerProcess(
            [sys.executable, "-c", f"import sys; sys.exit({code})", "--port", str(port)],
            port=port,
            die_with_parent=False,
        )
        server.launch()
    deadline = time.monotonic() + 30
    while server.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    return server


def test_a_dead_leader_is_seen_without_being_reaped_until_it_is_killed():
    server = _exited_server(3)
    pid = server.proc.pid
    assert not server.alive() and "exit code 3" in server.death()
    assert _state(pid) == "Z"  # still holds its pid: its group's number cannot go to another process
    server.stop()
    assert _state(pid) is None and server.proc.returncode == 3


def test_a_leader_reaped_elsewhere_gets_no_signal_to_its_old_group(monkeypatch):
    server = _exited_server(0)
    server.proc.wait()  # reaped by someone else: the number may belong to another process by now
    sent = []
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: sent.append((pgid, sig)))
    server.stop()
    assert sent == []  # before: SIGKILL to group `pid`, whoever held it
