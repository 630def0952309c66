"""Command lines and environments for external inference engines (vLLM, SGLang), by backend name.

    argv = engine_argv("vllm", "/models/judge", role="genrm", port=8000, served_model_name="tiny:judge")
    # [<vllm env python>, '-m', 'vllm.entrypoints.openai.api_server', '--model', '/models/judge', ...]
    env = engine_env("vllm", api_key, role="policy", device="cpu")

For `rlrm launch server --backend vllm|sglang` and scripts: each backend object writes its own command line
(rlrm/launch/fleet/backends.py); a fleet's replicas are written by `ReplicaLaunch` there.
`rlrm launch server --backend vllm --dry-run` prints the command without an engine installed.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlrm.errors import ConfigError
from rlrm.launch.common.roles import Role
from rlrm.launch.fleet.backends import BACKENDS, Backend, ReplicaLaunch, backend_for, engine_device

__all__ = ["engine_argv", "engine_device", "engine_env", "require_backend"]


def engine_argv(
    backend: str | Backend,
    model: str,
    role: Role | str,
    port: int,
    host: str = "127.0.0.1",
    dtype: str = "bfloat16",
    max_batch: int = 256,
    api_key: str | None = None,
    served_model_name: str | None = None,
    device: str = "cpu",
    gpu_memory_utilization: float | None = 0.85,
    python: str | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The argv that serves `model` in `role` with an external `backend`; the key is never in it for vLLM."""
    engine = backend_for(backend)
    if not engine.external:
        external = ", ".join(name for name, b in BACKENDS.items() if b.external)
        raise ConfigError(f"backend {engine} is rlrm's own server, not an external engine; use one of {external}")
    launch = ReplicaLaunch(
        engine,
        model,
        Role(role),
        dtype=dtype,
        max_batch=max_batch,
        api_key=api_key,
        extra_args=tuple(extra_args),
        served_model_name=served_model_name,
        gpu_memory_utilization=gpu_memory_utilization,
        device=device,
    )
    return engine.argv(launch, host, port, python=python)


def engine_env(
    backend: str | Backend, api_key: str | None, role: Role | str = Role.GENRM, device: str = "cpu"
) -> dict[str, str | None]:
    """Environment variables the engine process needs (vLLM: its key, dev mode for a policy, the CPU KV cache)."""
    return backend_for(backend).env(api_key, Role(role), device)


def require_backend(backend: str | Backend) -> None:
    """Raise a one-line error naming the variable and the setup command when the engine env is missing."""
    backend_for(backend).require()
