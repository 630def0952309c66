"""The unit tier refuses what belongs to the integration tier (tests/unit/conftest.py)."""

from __future__ import annotations

import multiprocessing
import socket
import subprocess
import sys

import pytest


def _refused(guard: dict, start) -> str:
    with pytest.raises(RuntimeError, match="unit tests start nothing") as caught:
        start()
    assert guard["seen"], "the guard records what it refused, so a test that swallows the error still fails"
    guard["seen"].clear()  # this test provoked it on purpose
    return str(caught.value)


def test_a_subprocess_is_refused_with_the_tier_to_move_to(unit_tier_guard):
    said = _refused(unit_tier_guard, lambda: subprocess.run([sys.executable, "-c", "pass"], check=True))
    assert "test_a_subprocess_is_refused" in said and "started a subprocess" in said
    assert said.endswith("move it to tests/integration")


def test_a_listening_socket_is_refused(unit_tier_guard):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # binding alone (a free port) is allowed; a server listens
        said = _refused(unit_tier_guard, sock.listen)
    assert "listened on a socket" in said


def test_a_process_is_refused(unit_tier_guard):
    said = _refused(unit_tier_guard, multiprocessing.get_context("spawn").Process(target=print).start)
    assert "started a process" in said


def test_the_training_loop_is_refused(unit_tier_guard, tmp_path):
    from rlrm.engine.trainer import train

    said = _refused(unit_tier_guard, lambda: train(tmp_path))
    assert "ran the training loop" in said


def test_finding_libc_is_a_lookup_not_a_process(unit_tier_guard):
    import ctypes.util

    assert ctypes.util.find_library("c")  # runs `ldconfig -p` under the hood (rlrm/allocator.py does this)
    assert not unit_tier_guard["seen"]
