"""Faults of a real vLLM at start (`pytest -m vllm`): each is one clear line, never a bare timeout."""

from __future__ import annotations

import json
import socket

import pytest
from held_ports import refused_port, reserved_port  # tests/fixtures/held_ports.py
from typer.testing import CliRunner
from vllm_fleets import EAGER  # tests/integration/launch/on_vllm/vllm_fleets.py

from rlrm.cli.main import app
from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.engine_argv import engine_argv, engine_env
from rlrm.launch.fleet.process import ServerProcess, ServerStartError

pytestmark = pytest.mark.vllm


def _vllm(model: str, timeout_s: float) -> ServerProcess:
    argv = engine_argv("vllm", model, "genrm", free_port(), dtype="float32")
    # movable: started again on a fresh port if another process took this one before vLLM bound it
    return ServerProcess.movable(argv, start_timeout_s=timeout_s, env=engine_env("vllm", None))


def test_a_model_vllm_cannot_serve_is_the_engines_own_error(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": ["NoSuchModelForCausalLM"], "model_type": "nosuch", "max_position_embeddings": 64})
    )
    server = _vllm(str(tmp_path), 600)
    with pytest.raises(ServerStartError) as err:
        server.start()
    line = str(err.value)
    assert "\n" not in line and line.startswith("server exited with code 1 while starting: ")
    assert "model type `nosuch`" in line and "not healthy" not in line  # vLLM's reason, not a timeout
    assert not server.alive()


def test_a_vllm_that_is_not_healthy_in_time_shows_its_log(tiny_policy_path):
    # vLLM serves on a port the health check never asks, so it is never healthy however fast the machine is
    # (a plain limit passed on a fast CI machine); 15 s is well past its first log lines (Triton's notice and
    # the API server's import warning come within 2 s of the start on 2 cores).
    # both ports held for the test (tests/fixtures/held_ports.py): vLLM binds the one it is given, and no other
    # test's server can answer on the one asked
    with reserved_port() as served_on, refused_port() as asked_on:
        argv = engine_argv("vllm", str(tiny_policy_path), "genrm", served_on, dtype="float32")
        server = ServerProcess(argv, port=asked_on, start_timeout_s=15, env=engine_env("vllm", None))
        with pytest.raises(ServerStartError, match=r"not healthy after 15 s; its log ends: .+") as err:
            server.start()
    assert "(empty log)" not in str(err.value)
    assert server.proc.poll() is not None  # stopped again, whole group


def test_a_taken_port_is_one_line(tiny_policy_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        args = ["launch", "server", "--backend", "vllm", "--model", str(tiny_policy_path), "--port", str(port)]
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 1 and f"port {port} on 127.0.0.1 is in use" in result.output


def test_a_model_that_fails_at_its_first_forward_stops_the_start(spread_disrm_path):
    # vLLM starts a DisRM whose heads are 8 wide and answers /health, but its CPU attention refuses them at the
    # first forward and the engine dies: the fleet's first request finds that, with vLLM's own error line.
    import asyncio

    from rlrm.config.reward import RewardServerConfig
    from rlrm.launch.fleet.server_fleet import ServerFleet

    cfg = RewardServerConfig(
        backend="vllm", model=str(spread_disrm_path), router="client", start_timeout_s=600, extra_args=EAGER
    )
    fleet = ServerFleet(cfg.fleet_spec(), role="disrm", model_path=str(spread_disrm_path))
    with pytest.raises(ServerStartError) as err:
        asyncio.run(fleet.start())
    line = str(err.value)
    assert line.startswith("reward.server: vllm failed its first request: http://127.0.0.1:") and "\n" not in line
    assert "Unsupported CPU attention configuration: head_dim=8" in line
    assert fleet.pool is not None and not any(s.alive() for s in fleet.pool.servers)  # torn down
