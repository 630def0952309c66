"""Command lines and environments for external inference engines (vLLM, SGLang), started as owned processes.

    argv = engine_argv("vllm", "/models/judge", role="genrm", port=8000, served_model_name="tiny:judge")
    # [<vllm env python>, '-m', 'vllm.entrypoints.openai.api_server', '--model', '/models/judge', ...]
    env = engine_env("vllm", api_key, role="policy", device="cpu")

The engines live in their own environments (rlrm/launch/fleet/engine_env.py finds them); nothing here imports
them. `rlrm launch server --backend vllm --dry-run` prints the command without one.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from rlrm.errors import ConfigError
from rlrm.launch.fleet.engine_env import ENGINES, EngineNotFound, find_engine

BACKENDS = ("embedded", "vllm", "sglang")
# vLLM's CPU KV cache in GiB: ample for tiny models, small enough for several engines on one machine
CPU_KV_CACHE_GIB = "1"
MAX_MODEL_LEN = 4096  # a cap for --max-model-len: a tiny model's own limit is used when it is lower


def engine_python(backend: str) -> str:
    """The engine env's python, or `$RLRM_VLLM_PYTHON` as a placeholder when there is none (for --dry-run)."""
    try:
        return find_engine(backend).python
    except EngineNotFound:
        return "$" + ENGINES[backend][1]


def engine_device(gpu_ids: Sequence[int] | None = None) -> str:
    """Where a launched engine runs: cuda when GPUs were handed out or this machine has an NVIDIA driver, else cpu."""
    return "cuda" if gpu_ids or shutil.which("nvidia-smi") else "cpu"


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
    device: str = "cpu",
    gpu_memory_utilization: float | None = 0.85,
    python: str | None = None,
) -> list[str]:
    """The argv that serves `model` in `role` with `backend` (vllm or sglang); the key is never in it for vLLM."""
    name = served_model_name or model
    if backend not in ("vllm", "sglang"):
        raise ConfigError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    exe = [python or engine_python(backend), "-m", ENGINES[backend][3]]
    if backend == "vllm":
        argv = exe + ["--model", model, "--host", host, "--port", str(port), "--dtype", dtype]
        argv += ["--served-model-name", name, "--max-num-seqs", str(max_batch)]
        max_len = _max_model_len(model)
        if max_len:
            argv += ["--max-model-len", str(max_len)]
        if role == "disrm":
            argv += ["--runner", "pooling", "--convert", "classify"]  # serves /classify with raw scores
        if role.startswith("policy"):
            # behaviour log-probs as the trainer computes them, log_softmax(logits / temperature): vLLM's default
            # (raw_logprobs) is taken before temperature, and off-policy modes train on them without a recompute
            argv += ["--logprobs-mode", "processed_logprobs"]
        if device == "cpu":
            # Whole prefills only: a split prefill with per-request seeds kills vLLM's CPU engine core
            # ("CPU Generator does not use offset"); FEASIBILITY.md, 2026-11-24.
            argv += ["--no-enable-chunked-prefill"]
        elif gpu_memory_utilization:
            argv += ["--gpu-memory-utilization", f"{gpu_memory_utilization:g}"]
        return argv  # the key goes in VLLM_API_KEY (engine_env), out of `ps`
    argv = exe + ["--model-path", model, "--host", host, "--port", str(port), "--dtype", dtype]
    argv += ["--served-model-name", name, "--max-running-requests", str(max_batch)]
    if device != "cpu" and gpu_memory_utilization:
        argv += ["--mem-fraction-static", f"{gpu_memory_utilization:g}"]
    if role == "disrm":
        argv += ["--is-embedding"]  # reward models are served as embedding/classification models
    if api_key:  # SGLang's documented way to take a key is this flag (visible in `ps`)
        argv += ["--api-key", api_key]
    return argv


def engine_env(backend: str, api_key: str | None, role: str = "genrm", device: str = "cpu") -> dict[str, str]:
    """Environment variables the engine process needs: vLLM reads its API key from VLLM_API_KEY, a vLLM policy
    server needs VLLM_SERVER_DEV_MODE=1 for `/collective_rpc` (its weight reload; rlrm/launch/client/wire.py), and
    vLLM on CPU sizes its KV cache from VLLM_CPU_KVCACHE_SPACE (GiB; one set in the environment wins)."""
    env = {"VLLM_API_KEY": api_key} if backend == "vllm" and api_key else {}
    if backend == "vllm" and role.startswith("policy"):
        env["VLLM_SERVER_DEV_MODE"] = "1"
    if backend == "vllm" and device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", CPU_KV_CACHE_GIB)
    return env


def require_backend(backend: str) -> None:
    """Raise a one-line error naming the variable and the setup command when the engine env is missing."""
    find_engine(backend)


def _max_model_len(model: str) -> int | None:
    """min(the model's max_position_embeddings, MAX_MODEL_LEN) for a local folder; None for a hub id (vLLM decides)."""
    try:
        config = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    limit = config.get("max_position_embeddings") or config.get("text_config", {}).get("max_position_embeddings")
    return min(int(limit), MAX_MODEL_LEN) if limit else None
