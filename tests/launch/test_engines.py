"""vLLM / SGLang launchers: the command lines, the missing-package error, and the owned-process lifecycle."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.errors import ConfigError
from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.engine_argv import engine_argv, engine_env, require_backend
from rlrm.launch.fleet.process import ServerProcess, ServerStartError


def test_vllm_argv_for_a_judge_and_a_disrm():
    judge = engine_argv("vllm", "Qwen/Qwen2.5-3B-Instruct", "genrm", 8001, api_key="k")
    assert judge[1:5] == ["serve", "Qwen/Qwen2.5-3B-Instruct", "--host", "127.0.0.1"]
    assert judge[judge.index("--port") + 1] == "8001"
    assert "k" not in judge and engine_env("vllm", "k") == {"VLLM_API_KEY": "k"}  # the key stays out of `ps`
    assert "--convert" not in judge
    disrm = engine_argv("vllm", "org/rm", "disrm", 8002)
    assert disrm[disrm.index("--runner") + 1] == "pooling" and disrm[disrm.index("--convert") + 1] == "classify"


def test_sglang_argv():
    argv = engine_argv("sglang", "org/rm", "disrm", 9000, dtype="float16", max_batch=32)
    assert argv[:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert argv[argv.index("--model-path") + 1] == "org/rm" and "--is-embedding" in argv
    assert argv[argv.index("--max-running-requests") + 1] == "32"
    with pytest.raises(ConfigError, match="unknown backend"):
        engine_argv("trt", "m", "genrm", 1)


def test_dry_run_prints_the_command():
    result = CliRunner().invoke(
        app,
        ["launch", "server", "--backend", "vllm", "--model", "org/m", "--role", "disrm", "--port", "8123", "--dry-run"],
    )
    assert result.exit_code == 0, result.output
    assert "vllm serve org/m" in result.output
    assert "--port 8123" in result.output and "--convert classify" in result.output


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_missing_vllm_is_one_clear_error():
    with pytest.raises(ConfigError, match=r"pip install 'rlrm\[vllm\]'"):
        require_backend("vllm")
    result = CliRunner().invoke(app, ["launch", "server", "--backend", "vllm", "--model", "org/m"])
    assert result.exit_code == 1 and "not installed" in result.output


def test_owned_process_lifecycle_with_a_stand_in_server():
    # A plain HTTP server stands in for vLLM (which cannot run here): readiness, then teardown by pid.
    port = free_port()
    stand_in = [
        sys.executable,
        "-c",
        "import http.server,sys\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self): self.send_response(200); self.end_headers(); self.wfile.write(b'ok')\n"
        "    def log_message(self, *a): pass\n"
        f"http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()",
    ]
    server = ServerProcess(stand_in, port=port, start_timeout_s=20)
    with server:
        assert server.alive()
        pid = server.proc.pid
    assert not server.alive()
    import os

    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_server_that_exits_is_reported_with_its_log():
    server = ServerProcess(
        [sys.executable, "-c", "import sys; print('CUDA out of memory'); sys.exit(3)"],
        port=free_port(),
        start_timeout_s=20,
    )
    with pytest.raises(ServerStartError, match="exited with code 3.*CUDA out of memory"):
        server.start()


def test_a_server_that_never_gets_healthy_times_out():
    server = ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], port=free_port(), start_timeout_s=1.5)
    with pytest.raises(ServerStartError, match="not healthy after 2 s"):
        server.start()
    assert not server.alive()


@pytest.mark.vllm
def test_vllm_serves_classify(tmp_path):  # runs only where vllm is installed (a CUDA machine)
    pytest.importorskip("vllm")
    port = free_port()
    with ServerProcess(
        engine_argv("vllm", "Skywork/Skywork-Reward-V2-Qwen3-0.6B", "disrm", port), port=port, start_timeout_s=900
    ) as server:
        import httpx

        out = httpx.post(
            server.url + "/classify",
            json={"model": "Skywork/Skywork-Reward-V2-Qwen3-0.6B", "input": "hi", "use_activation": False},
        ).json()
        assert isinstance(out["data"][0]["probs"][0], float)
