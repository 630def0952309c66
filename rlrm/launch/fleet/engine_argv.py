"""Command lines for external inference engines (vLLM, SGLang), started as owned processes.

    argv = engine_argv("vllm", "Qwen/Qwen2.5-3B-Instruct", role="genrm", port=8000)
    # ['vllm', 'serve', 'Qwen/Qwen2.5-3B-Instruct', '--host', '127.0.0.1', '--port', '8000', ...]

They are optional extras: nothing here imports them. A missing package is one clear error with
the install line; `rlrm launch server --backend vllm --dry-run` prints the command without it.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys

from rlrm.errors import ConfigError

BACKENDS = ("embedded", "vllm", "sglang")


def engine_argv(
    backend: str,
    model: str,
    role: str,
    port: int,
    host: str = "127.0.0.1",
    dtype: str = "bfloat16",
    max_batch: int = 256,
    api_key: str | None = None,
    served_model_name: str | None = None,
) -> list[str]:
    """The argv that serves `model` in `role` with `backend` (vllm or sglang)."""
    name = served_model_name or model
    if backend == "vllm":
        exe = shutil.which("vllm")
        argv = [
            exe or "vllm",
            "serve",
            model,
            "--host",
            host,
            "--port",
            str(port),
            "--dtype",
            dtype,
            "--served-model-name",
            name,
            "--max-num-seqs",
            str(max_batch),
        ]
        if role == "disrm":
            argv += ["--runner", "pooling", "--convert", "classify"]  # serves /classify with raw scores
        return argv  # the key goes in VLLM_API_KEY (engine_env), out of `ps`
    if backend == "sglang":
        argv = [
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--model-path",
            model,
            "--host",
            host,
            "--port",
            str(port),
            "--dtype",
            dtype,
            "--served-model-name",
            name,
            "--max-running-requests",
            str(max_batch),
        ]
        if role == "disrm":
            argv += ["--is-embedding"]  # reward models are served as embedding/classification models
        if api_key:  # SGLang's documented way to take a key is this flag (visible in `ps`)
            argv += ["--api-key", api_key]
        return argv
    raise ConfigError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")


def engine_env(backend: str, api_key: str | None, role: str = "genrm") -> dict[str, str]:
    """Environment variables the engine process needs: vLLM reads its API key from VLLM_API_KEY, and a vLLM
    policy server needs VLLM_SERVER_DEV_MODE=1 for `/collective_rpc` (its weight reload; rlrm/launch/client/wire.py)."""
    env = {"VLLM_API_KEY": api_key} if backend == "vllm" and api_key else {}
    if backend == "vllm" and role == "policy":
        env["VLLM_SERVER_DEV_MODE"] = "1"
    return env


def require_backend(backend: str) -> None:
    """Raise a one-line error with the install command when the engine is not installed."""
    module = {"vllm": "vllm", "sglang": "sglang"}[backend]
    if importlib.util.find_spec(module) is None:
        raise ConfigError(
            f"--backend {backend} needs the {module} package, which is not installed here; "
            f"pip install 'rlrm[{backend}]' on a CUDA machine, or use --backend embedded"
        )
