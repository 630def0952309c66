"""The SGLang router (`sglang-router` on PyPI, a Rust binary that runs on CPU) in front of replicas.

Measured with sglang-router 0.3.2 against rlrm's embedded servers: it forwards
`/v1/chat/completions`, `/v1/completions` and `/generate` (adding SGLang fields such as
`no_stop_trim` that the embedded server accepts), answers `/v1/models` itself, and does not route
`/classify` (404). So GenRM traffic can go through it, and DisRM traffic uses rlrm's client-side
balancer. Each router gets its own Prometheus port, so two routers on one host never collide.

The router retries a failed upstream request on another worker by itself, so a dead replica never
reaches rlrm's own counters. `RouterCounters` reads the router's retry and upstream-error counters
from that Prometheus port (names as 0.3.2 exposes them, `smg_worker_retries_total` and
`smg_worker_errors_total`, and as older releases did, `sgl_router_*`), as deltas per call, with the restarts of a
router that died (the fleet restarts it on its ports: rlrm/launch/fleet/server_fleet.py).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time

from rlrm.call_errors import TransientError
from rlrm.launch.common import http
from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.process import ServerProcess, ServerStartError

ROUTED_PATHS = ("/v1/chat/completions", "/v1/completions", "/generate")


def sglang_router_available() -> bool:
    return importlib.util.find_spec("sglang_router") is not None


def sglang_router_argv(worker_urls: list[str], port: int, metrics_port: int, host: str = "127.0.0.1") -> list[str]:
    return [
        sys.executable,
        "-m",
        "sglang_router.launch_router",
        "--host",
        host,
        "--port",
        str(port),
        "--worker-urls",
        *worker_urls,
        "--prometheus-port",
        str(metrics_port),
        "--prometheus-host",
        host,
        # power-of-two choices needs two workers to choose from
        "--policy",
        "power_of_two" if len(worker_urls) > 1 else "round_robin",
        "--log-level",
        "warn",
    ]


def sglang_router(worker_urls: list[str], host: str = "127.0.0.1", start_timeout_s: float = 60.0) -> ServerProcess:
    """A router process over `worker_urls` (not started), on free ports (fresh ones if another process takes
    them first); `router_metrics_url(router)` is its Prometheus page once started.

    Started means ready to route: the router's `/health` answers 200 before it has registered any worker (it
    checks each worker's own /health first), and requests in between are answered 503 `no_available_workers`
    (seen in CI under load: a custom reward's first calls failed and were retried). So readiness is read from
    `/readiness`, 200 once a worker is registered and healthy; `wait_for_workers` waits for all of them."""

    def argv_on(port: int) -> list[str]:
        return sglang_router_argv(worker_urls, port, free_port(host), host)

    return ServerProcess.on_free_port(argv_on, host=host, start_timeout_s=start_timeout_s, health_path="/readiness")


def wait_for_workers(router: ServerProcess, count: int, timeout_s: float) -> None:
    """Wait until the started `router` lists `count` healthy workers on `/workers` (ServerStartError after
    `timeout_s`); a release without that page has only `/readiness`, which `start` waited for."""
    deadline = time.monotonic() + timeout_s
    healthy = 0
    while True:
        if router.exit_code() is not None:  # died (or was stopped) meanwhile: nothing to wait for
            raise ServerStartError(
                f"the SGLang router at {router.url} exited with code {router.exit_code()} while its workers were "
                f"waited for: {router.why()}"
            )
        try:
            page = http.get(router.url + "/workers", timeout_s=2.0)
            if page.status == 404:
                return
            if page.status == 200:
                healthy = sum(bool(w.get("is_healthy")) for w in json.loads(page.text).get("workers", []))
                if healthy >= count:
                    return
        except (TransientError, ValueError, AttributeError):
            pass
        if time.monotonic() > deadline:
            raise ServerStartError(
                f"the SGLang router at {router.url} had {healthy} of its {count} workers registered and healthy after "
                f"{timeout_s:g} s; its log ends: {router.log_tail()}"
            )
        time.sleep(0.1)


def router_metrics_url(router: ServerProcess) -> str:
    """The Prometheus page of a router from `sglang_router` (its ports are known once it has started)."""
    argv = router.argv
    return f"http://{router.host}:{argv[argv.index('--prometheus-port') + 1]}/metrics"


# counter -> the metric names that hold it (summed over their label sets), newest release first
ROUTER_COUNTERS = {
    "retries": ("smg_worker_retries_total", "sgl_router_retries_total"),
    "errors": ("smg_worker_errors_total", "sgl_router_request_errors_total"),
}


def parse_router_counters(text: str) -> dict[str, float]:
    """{"retries": n, "errors": n} summed from a Prometheus text page (0 for a counter not yet on it)."""
    names = {name: key for key, group in ROUTER_COUNTERS.items() for name in group}
    totals = dict.fromkeys(ROUTER_COUNTERS, 0.0)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            totals[names[name]] += float(line.rsplit(" ", 1)[1])
    return totals


class RouterCounters:
    """Per-call deltas of a router's retry and upstream-error counters, and of its restarts.

    counters = RouterCounters(router_metrics_url(router), prefix="reward/")
    counters.take()   # {"reward/router_retries": 3.0, "reward/router_errors": 3.0} since the last call
    counters.restarted()   # the fleet restarted the router (rlrm/launch/fleet/server_fleet.py)
    counters.take()   # ... and "reward/router_restarts": 1.0 (only in a call that has restarts to report)
    """

    def __init__(self, metrics_url: str, prefix: str, timeout_s: float = 2.0):
        self.metrics_url, self.prefix, self.timeout_s = metrics_url, prefix, timeout_s
        self._last = dict.fromkeys(ROUTER_COUNTERS, 0.0)
        self.restarts = 0
        self._restarts_seen = 0

    def restarted(self) -> None:
        """The router was started again: counted, and its new process counts from zero."""
        self.restarts += 1
        self._last = dict.fromkeys(ROUTER_COUNTERS, 0.0)

    def take(self) -> dict[str, float]:
        """The counters' growth since the last call; {} when the page cannot be read (counted at the next read)."""
        try:
            page = http.get(self.metrics_url, timeout_s=self.timeout_s)  # local: a millisecond
            if page.status != 200:
                return {}
            now = parse_router_counters(page.text)
        except (TransientError, ValueError):
            return {}
        deltas = {f"{self.prefix}router_{key}": max(0.0, now[key] - self._last[key]) for key in now}
        self._last = now
        restarts, self._restarts_seen = self.restarts - self._restarts_seen, self.restarts
        if restarts:
            deltas[f"{self.prefix}router_restarts"] = float(restarts)
        return deltas
