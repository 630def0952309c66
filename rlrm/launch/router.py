"""The SGLang router (`sglang-router` on PyPI, a Rust binary that runs on CPU) in front of replicas.

Measured with sglang-router 0.3.2 against rlrm's embedded servers: it forwards
`/v1/chat/completions`, `/v1/completions` and `/generate` (adding SGLang fields such as
`no_stop_trim` that the embedded server accepts), answers `/v1/models` itself, and does not route
`/classify` (404). So GenRM traffic can go through it, and DisRM traffic uses rlrm's client-side
balancer. Each router gets its own Prometheus port, so two routers on one host never collide.
"""

from __future__ import annotations

import importlib.util
import sys

from rlrm.launch.ports import free_port
from rlrm.launch.process import ServerProcess

ROUTED_PATHS = ("/v1/chat/completions", "/v1/completions", "/generate")


def sglang_router_available() -> bool:
    return importlib.util.find_spec("sglang_router") is not None


def sglang_router_argv(worker_urls: list[str], port: int, metrics_port: int, host: str = "127.0.0.1") -> list[str]:
    return [
        sys.executable, "-m", "sglang_router.launch_router", "--host", host, "--port", str(port),
        "--worker-urls", *worker_urls, "--prometheus-port", str(metrics_port), "--prometheus-host", host,
        # power-of-two choices needs two workers to choose from
        "--policy", "power_of_two" if len(worker_urls) > 1 else "round_robin", "--log-level", "warn",
    ]


def sglang_router(worker_urls: list[str], host: str = "127.0.0.1", start_timeout_s: float = 60.0) -> ServerProcess:
    """A router process over `worker_urls` (not started), on free ports."""
    port = free_port(host)
    argv = sglang_router_argv(worker_urls, port, free_port(host), host)
    return ServerProcess(argv, host=host, port=port, start_timeout_s=start_timeout_s)
