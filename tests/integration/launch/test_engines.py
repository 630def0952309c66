"""vLLM / SGLang launchers: the command lines, the missing-package error, and the owned-process lifecycle."""

from __future__ import annotations

import sys

import pytest
from held_ports import refused_port  # tests/fixtures/held_ports.py
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.errors import ConfigError
from rlrm.launch.fleet.engine_argv import engine_argv, engine_env, require_backend
from rlrm.launch.fleet.process import ServerProcess, ServerStartError


def test_vllm_argv_for_a_judge_and_a_disrm():
    judge = engine_argv("vllm", "Qwen/Qwen2.5-3B-Instruct", "genrm", 8001, api_key="k", python="/v/bin/python")
    assert judge[:5] == [
        "/v/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "Qwen/Qwen2.5-3B-Instruct",
    ]
    assert judge[judge.index("--port") + 1] == "8001"
    assert "k" not in judge and engine_env("vllm", "k")["VLLM_API_KEY"] == "k"  # the key stays out of `ps`
    assert (
        "--convert" not in judge and "--max-model-len" not in judge and "--logprobs-mode" not in judge
    )  # a hub id: vLLM reads its own limit
    disrm = engine_argv("vllm", "org/rm", "disrm", 8002, served_model_name="rm")
    assert disrm[disrm.index("--runner") + 1] == "pooling" and disrm[disrm.index("--convert") + 1] == "classify"
    assert disrm[disrm.index("--served-model-name") + 1] == "rm"


def test_vllm_on_cpu_and_on_gpu(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 64}')
    cpu = engine_argv("vllm", str(tmp_path), "policy", 1, dtype="float32", device="cpu", python="p")
    assert "--no-enable-chunked-prefill" in cpu and "--gpu-memory-utilization" not in cpu  # the seeded-sampling crash
    assert cpu[cpu.index("--max-model-len") + 1] == "64" and cpu[cpu.index("--dtype") + 1] == "float32"
    # a policy's log-probs after temperature (the trainer's log_softmax(logits / T)); a judge's are not read
    assert cpu[cpu.index("--logprobs-mode") + 1] == "processed_logprobs"
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    env = engine_env("vllm", None, "policy", "cpu")
    assert env == {"VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    assert engine_env("vllm", None, "genrm", "cpu") == {"VLLM_CPU_KVCACHE_SPACE": "4"}  # the user's setting wins
    gpu = engine_argv("vllm", "m", "genrm", 1, device="cuda", gpu_memory_utilization=0.3, python="p")
    assert gpu[gpu.index("--gpu-memory-utilization") + 1] == "0.3" and "--no-enable-chunked-prefill" not in gpu
    assert engine_env("vllm", None, "genrm", "cuda") == {}
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 131072}')
    big = engine_argv("vllm", str(tmp_path), "genrm", 1, python="p")
    assert big[big.index("--max-model-len") + 1] == "4096"


def test_sglang_argv():
    argv = engine_argv("sglang", "org/rm", "disrm", 9000, dtype="float16", max_batch=32, python="/s/bin/python")
    assert argv[:3] == ["/s/bin/python", "-m", "sglang.launch_server"]
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
    assert "-m vllm.entrypoints.openai.api_server --model org/m" in result.output
    assert "--port 8123" in result.output and "--convert classify" in result.output


def test_a_tiny_alias_is_resolved_to_its_folder_for_vllm(tiny_policy_path):
    result = CliRunner().invoke(
        app, ["launch", "server", "--backend", "vllm", "--model", "tiny:policy", "--port", "8123", "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    argv = result.output.split()
    assert argv[argv.index("--model") + 1] == str(tiny_policy_path)  # vLLM cannot read "tiny:policy"
    assert argv[argv.index("--served-model-name") + 1] == "tiny:policy"  # the name clients ask for


def test_missing_engine_env_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("RLRM_VLLM_PYTHON", sys.executable)  # rlrm's own python: no vllm in this venv
    with pytest.raises(ConfigError, match=r"RLRM_VLLM_PYTHON=.* cannot import vllm.*bash scripts/setup.sh --vllm"):
        require_backend("vllm")
    result = CliRunner().invoke(app, ["launch", "server", "--backend", "vllm", "--model", "org/m"])
    assert result.exit_code == 1 and "cannot import vllm" in result.output


def test_owned_process_lifecycle_with_a_stand_in_server():
    # A plain HTTP server stands in for vLLM (which cannot run here): readiness, then teardown by pid.
    def stand_in(port: int) -> list[str]:
        return [
            sys.executable,
            "-c",
            "import http.server,sys\n"
            "class H(http.server.BaseHTTPRequestHandler):\n"
            "    def do_GET(self): self.send_response(200); self.end_headers(); self.wfile.write(b'ok')\n"
            "    def log_message(self, *a): pass\n"
            f"http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()",
        ]

    server = ServerProcess.on_free_port(stand_in, start_timeout_s=20)  # moved if another process takes its port
    with server:
        assert server.alive()
        pid = server.proc.pid
    assert not server.alive()
    import os

    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_server_that_exits_is_reported_with_its_log():
    with refused_port() as port:  # no other test's server answers /health there meanwhile
        server = ServerProcess(
            [sys.executable, "-c", "import sys; print('CUDA out of memory'); sys.exit(3)"],
            port=port,
            start_timeout_s=20,
        )
        with pytest.raises(ServerStartError, match="exited with code 3.*CUDA out of memory"):
            server.start()


def test_a_server_that_never_gets_healthy_times_out():
    with refused_port() as port:  # no other test's server answers /health there meanwhile
        server = ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], port=port, start_timeout_s=1.5)
        with pytest.raises(ServerStartError, match="not healthy after 2 s"):
            server.start()
    assert not server.alive()
