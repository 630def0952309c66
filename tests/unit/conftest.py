"""The unit tier starts nothing: a test under tests/unit that starts a subprocess or a process, listens on a
socket, joins a torch.distributed process group or runs the training loop fails, with the line that says where it
belongs (tests/integration). The guard is on from each unit test's setup (its fixtures included) to its teardown."""

from __future__ import annotations

import multiprocessing.process
import socket
import subprocess
import sys

import pytest

_state: dict = {"test": None, "seen": []}


def _guarded(owner, name: str, what: str) -> None:
    original = getattr(owner, name)
    if getattr(original, "_unit_guard", False):
        return

    def guard(*args, **kwargs):
        if _state["test"] is not None and not _library_probe():
            _state["seen"].append(what)
            raise UnitTierViolation(
                f"{_state['test']} {what}: unit tests start nothing (no subprocess, server, process group or "
                "training run); move it to tests/integration"
            )
        return original(*args, **kwargs)

    guard._unit_guard = True
    setattr(owner, name, guard)


def _library_probe() -> bool:
    """ctypes.util.find_library runs `ldconfig -p` to find libc (rlrm/allocator.py): a lookup, not a process a test
    starts."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.endswith(("ctypes/util.py",)):
            return True
        frame = frame.f_back
    return False


class UnitTierViolation(RuntimeError):
    """A unit test tried to start something that belongs to the integration tier."""


_guarded(subprocess.Popen, "__init__", "started a subprocess")
_guarded(socket.socket, "listen", "listened on a socket (a server)")
_guarded(multiprocessing.process.BaseProcess, "start", "started a process")


def _guard_heavy() -> None:
    """torch.distributed and the trainer are guarded once they are imported (both are imported here, before the test modules that bind `train` by name)."""
    import torch.distributed

    import rlrm.engine.trainer

    _guarded(torch.distributed, "init_process_group", "joined a torch.distributed process group")
    _guarded(rlrm.engine.trainer, "train", "ran the training loop")


_guard_heavy()


# runtest_setup/teardown are called through the item's own hooks, so these run for tests under tests/unit only
# (pytest_runtest_protocol would run for every test of the session).
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    _state["test"], _state["seen"] = item.nodeid, []
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        result = yield
    finally:
        _state["test"] = None
    # A test that caught the violation (pytest.raises(Exception), a retry loop) still fails here.
    if _state["seen"]:
        pytest.fail(f"{item.nodeid} {_state['seen'][0]}: move it to tests/integration", pytrace=False)
    return result


@pytest.fixture
def unit_tier_guard() -> dict:
    """The guard's state, for the test that checks the guard itself (tests/unit/test_unit_tier.py)."""
    return _state


@pytest.fixture(autouse=True)
def _no_engine_venvs(monkeypatch, tmp_path_factory):
    """The engine lookup (rlrm/launch/fleet/engine_env.py) asks a found venv's python for its version, a subprocess:
    in the unit tier no vLLM or SGLang venv is found, so the tier gives the same result whether or not
    `scripts/setup.sh --vllm` has built one beside the checkout."""
    empty = tmp_path_factory.getbasetemp() / "no-engine-venv"
    monkeypatch.setenv("RLRM_VLLM_VENV", str(empty))
    monkeypatch.setenv("RLRM_SGLANG_VENV", str(empty))
