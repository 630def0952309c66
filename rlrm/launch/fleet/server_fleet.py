"""One server fleet for every role: the policy's rollout servers and the reward models' servers.

    fleet = ServerFleet(served.fleet_spec(profile), role="policy", model_path=path, api_key=None)  # engine/served.py
    await fleet.start()              # launched replicas healthy (or running addresses checked), router up
    fleet.urls                       # where requests go: the router, or the replicas for rlrm's balancer
    fleet.replica_urls               # every replica itself (weight sync, sleep/wake)
    fleet.replica_nodes              # where each launched replica runs ("local", or its Ray node's IP and id)
    await fleet.close()              # in `finally`: router and replicas stopped by pid

The settings are a `FleetSpec` (rlrm/launch/fleet/spec.py), which `reward.server` and `rollout.server`
(rlrm/config/servers.py) turn themselves into. Launch, readiness, supervision,
the SGLang router in front and teardown live here once; the roles differ only in the endpoint
their readiness probe calls and in what a restarted replica must be given before it serves.
With `launch_on: ray` the replicas are placed on Ray nodes (rlrm/launch/fleet/ray_replicas.py: a placement
group, one small actor per replica owning its process there); the pool supervises them as local ones.

The router is supervised too: when its process dies (OOM-killed, a crash), one line says so (exit code, log
tail) and it is started again on its port (its clients keep its address) and waited for until it routes to the
live replicas; `router_restarts` counts those restarts (and `RouterCounters` reports them as
`<prefix>router_restarts`), apart from the replicas' `restarts`. While it is down `router_down()` is true: the
rollout engine sends nothing to it until it is back.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
import threading
import time
from typing import Awaitable, Callable, cast

from rlrm.errors import ConfigError
from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.common.auth import new_run_key
from rlrm.launch.common.roles import Role
from rlrm.launch.fleet.backends import ReplicaLaunch, backend_for
from rlrm.launch.fleet.health import check_servers
from rlrm.launch.fleet.pool import ServerPool
from rlrm.launch.fleet.process import ServerProcess, ServerStartError
from rlrm.launch.fleet.ray_replicas import RayReplica, RayReplicas
from rlrm.launch.fleet.router import (
    RouterCounters,
    router_metrics_url,
    sglang_router,
    sglang_router_argv,
    sglang_router_available,
    wait_for_workers,
)
from rlrm.launch.fleet.spec import FleetSpec

# what a policy replica restarted by the supervisor waits for before /health says ok (rlrm/launch/server/app.py)
WAIT_FOR_WEIGHTS = ["--wait-for-weights"]


def server_root(url: str) -> str:
    """The root every request path is appended to: an OpenAI-style base URL (`https://host/v1`) loses its `/v1`,
    because rlrm's paths (`/v1/chat/completions`, `/v1/models`) carry it; any other path stays as a prefix."""
    from urllib.parse import urlsplit

    url = url.rstrip("/")
    return url[: -len("/v1")] if urlsplit(url).path.endswith("/v1") else url


class ServerFleet:
    """Replicas (launched, or running `addresses`) and the router in front of them.

    Args:
        spec: the fleet's settings (`section` names them in errors).
        role: policy, genrm or disrm (a `Role`, or its string).
        model_path: the model launched replicas serve.
        api_key: the servers' bearer key (read from `api_key_env` by the caller), or None.
        headers: extra headers the readiness probes of running `addresses` send (read from the environment by the
            caller: values, never written anywhere), or None.
        on_restart: awaited with a restarted replica's URL before it may serve again (the policy
            fleet loads the current weights into it); launched embedded policy replicas are then
            restarted with `--wait-for-weights`.
        ray_address: the Ray cluster `launch_on: ray` replicas join when Ray is not initialised yet
            (None: a local Ray).
        weights_files: the run's weights folder, made (owner-only) just before the replicas launch: launched
            embedded policy replicas load weights from there only (`--weights-dir`).
    """

    def __init__(
        self,
        spec: FleetSpec,
        role: Role | str,
        model_path: str,
        api_key: str | None = None,
        on_restart: Callable[[str], Awaitable[None]] | None = None,
        ray_address: str | None = None,
        weights_files: WeightFiles | None = None,
        headers: dict[str, str] | None = None,
    ):
        if not isinstance(spec, FleetSpec):  # a config section is not a spec: call its .fleet_spec()
            raise TypeError(f"ServerFleet takes a FleetSpec, not {type(spec).__name__}; pass section.fleet_spec()")
        self.spec, self.role, self.model_path, self.api_key = spec, Role(role), model_path, api_key
        self.backend = backend_for(spec.backend)  # what differs between embedded, vLLM and SGLang
        self.headers = headers  # extra headers of every probe (a hosted API's reward.server.headers_env)
        self.weights_files = weights_files
        self.ray_address = ray_address
        self.placer: RayReplicas | None = None
        self.section = spec.section
        self.on_restart = on_restart
        self.pool: ServerPool | None = None
        self.router: ServerProcess | None = None
        self.router_counters: RouterCounters | None = None
        self.replica_urls: list[str] = [server_root(u) for u in spec.addresses]
        self._supervisor: asyncio.Task | None = None
        self._router_watch: asyncio.Task | None = None  # restarts the router when it died (`_watch_router`)
        self.router_restarts = 0
        self.router_death = ""  # exit code and cause of the router's last death
        self._router_restarting = False
        # `close` and a router restart's launch one at a time: no router is launched once `close` began
        self._router_lock = threading.Lock()
        self._closing = False

    @property
    def metrics_prefix(self) -> str:
        """Where this fleet's counters go: the policy's under rollout/, the reward models' under reward/."""
        return self.role.metrics_prefix

    @property
    def urls(self) -> list[str]:
        """Where requests go: the router when one is in front, else every replica."""
        return [self.router.url] if self.router is not None else list(self.replica_urls)

    def uses_router(self) -> bool:
        """Whether an SGLang router goes in front (raises ConfigError for a choice that cannot work)."""
        choice = self.spec.router
        if choice == "client":
            return False
        if choice == "sglang":
            if not self.role.generates:
                raise ConfigError(
                    f"sglang-router does not route /classify; use {self.section}.router=client for a DisRM"
                )
            if not sglang_router_available():
                raise ConfigError(f"{self.section}.router=sglang needs sglang-router: pip install 'rlrm[router]'")
            return True
        # auto: not for /classify, not for one policy replica, and not for vLLM policy servers, whose
        # /v1/completions fields (return_token_ids) the router was never measured to pass through
        if any(server_root(u) != u.rstrip("/") for u in self.spec.addresses):
            return False  # a hosted API's base URL: no /health for the router to register it with
        policy = self.role is Role.POLICY
        if policy and (not self.backend.native_generate or len(self.spec.addresses or [None] * self.spec.replicas) < 2):
            return False  # one policy replica: nothing to route, and rlrm's client sends its requests batched
        return self.role.generates and sglang_router_available()

    def argvs(self, base_port: int = 8000, router_port: int = 30000) -> list[list[str]]:
        """The command line of every process `start` would launch (replicas, then the router): `--dry-run` prints them."""
        if self.spec.addresses:
            replicas, out = list(self.spec.addresses), []
        else:
            ports = [base_port + i for i in range(self.spec.replicas)]  # illustrative: real runs take free ports
            host = "NODE_IP" if self.on_ray else "127.0.0.1"  # on Ray: the IP of the node it is placed on
            replicas = [f"http://{host}:{p}" for p in ports]
            launch = self.replica_launch()
            out = [launch.argv(host, p) for p in ports]
        if self.uses_router():
            out.append(sglang_router_argv(replicas, router_port, router_port + 1))
        return out

    def replica_launch(self) -> ReplicaLaunch:
        """What every launched replica is started with: the spec, this fleet's role, model, key and flags."""
        return ReplicaLaunch.of(
            self.spec, self.role, self.model_path, self.api_key, self.extra_args(), served_model_name=self.served_name
        )

    @property
    def served_name(self) -> str:
        """The model name launched replicas answer to: served_model_name, else the profile's model name
        (`tiny:judge`, which the reward clients send), else the folder they serve."""
        return self.spec.served_model_name or self.spec.model or self.model_path

    @property
    def on_ray(self) -> bool:
        return self.spec.on_ray

    def where(self) -> str:
        """Where launched replicas go, in words (`--dry-run` prints it)."""
        if not self.on_ray:
            return "this node (local subprocesses)"
        bundle = RayReplicas(self.spec, self.section).bundle()
        cluster = (
            f"the Ray cluster at {self.ray_address}"
            if self.ray_address
            else "the Ray cluster the run joins (else a local Ray)"
        )
        return (
            f"Ray nodes: one placement-group bundle {bundle} per replica, strategy {self.spec.placement}, on {cluster}"
        )

    @property
    def replica_nodes(self) -> list[str]:
        """Where each launched replica runs: "local", or "<node IP> (<node id>)" on Ray."""
        if self.pool is None:
            return []
        if self.placer is None:  # local subprocesses
            return ["local"] * len(self.pool.servers)
        return [f"{s.host} ({s.node_id[:12]})" for s in cast("list[RayReplica]", self.pool.servers)]  # placed on Ray

    def _placed_line(self) -> str:
        """`rollout.server: 2 replicas (ray): replica 0 on 10.0.0.2 (<node id>) at http://10.0.0.2:41234, ...`"""
        n = self.spec.replicas
        where = ", ".join(
            f"replica {i} on {node} at {url}"
            for i, (node, url) in enumerate(zip(self.replica_nodes, self.replica_urls))
        )
        return f"{self.section}: {n} replica{'s' * (n > 1)} (ray): {where}"

    def extra_args(self) -> list[str]:
        """The section's extra_args, after the batch window of embedded replicas that generate (a policy's, a judge's:
        their requests arrive one by one, a batch closed 2 ms after its first held a few of them) and the
        weight-sync flags of embedded policy replicas."""
        c = self.spec
        flags: list[str] = []
        if self.role.generates and c.batching is not None:
            flags += self.backend.batch_flags(c.batching)
        if self.role is Role.POLICY:
            flags += self.backend.policy_flags(
                c.sync_timeout_s if c.weight_sync == "distributed" else None,
                str(self.weights_files.root) if self.weights_files is not None else None,
            )
        return flags + list(c.extra_args)

    async def start(self, check_timeout_s: float = 30.0) -> None:
        """Launch (or check) the replicas, then the router; anything started is stopped again on failure."""
        spec = self.spec
        use_router = self.uses_router()  # a wrong choice fails before anything starts
        self._closing = False
        try:
            if spec.addresses:  # servers someone else runs: healthy, and of the right role, before any training starts
                await check_servers(
                    self.replica_urls,
                    self.role,
                    self.api_key,
                    spec.served_model_name or spec.model,
                    spec.start_timeout_s,
                    check_timeout_s,
                    what=f"{self.section}.addresses",
                    served_model_name=spec.served_model_name,
                    headers=self.headers,
                    backend=self.backend,
                )
            else:
                self.backend.require()
                gated = self.role.takes_weights and self.backend.waits_for_weights and self.on_restart is not None
                if self.weights_files is not None:  # before any replica names it: nobody else made it first
                    await asyncio.to_thread(self.weights_files.create)
                if self.on_ray:
                    self.placer = RayReplicas(spec, self.section, self.ray_address)
                self.pool = await asyncio.to_thread(  # placing on Ray waits for the placement group
                    ServerPool,
                    self.replica_launch(),
                    replicas=spec.replicas,
                    restart_args=WAIT_FOR_WEIGHTS if gated else None,
                    placer=self.placer,
                )
                started = time.monotonic()
                await asyncio.to_thread(self.pool.start, spec.start_timeout_s)
                self.replica_urls = self.pool.urls
                if self.backend.external:  # part of being ready: what start_timeout_s left, 60 s at least
                    await self._first_request(max(60.0, spec.start_timeout_s - (time.monotonic() - started)))
                if self.on_ray:
                    print(self._placed_line(), file=sys.stderr, flush=True)
                self._supervisor = asyncio.get_running_loop().create_task(
                    self.pool.supervise(on_restart=self.on_restart)
                )
            if use_router:
                self.router = sglang_router(self.replica_urls, start_timeout_s=spec.start_timeout_s)
                await asyncio.to_thread(self.router.start)
                await asyncio.to_thread(wait_for_workers, self.router, len(self.replica_urls), spec.start_timeout_s)
                self.router_counters = RouterCounters(router_metrics_url(self.router), prefix=self.metrics_prefix)
                self._router_watch = asyncio.get_running_loop().create_task(self._watch_router())
        except BaseException:
            await self.close()
            raise

    async def _first_request(self, timeout_s: float) -> None:
        """One request of the role's shape to every launched engine replica: an engine that is healthy but cannot
        run the model (vLLM's CPU attention refuses some head sizes at the first forward) fails here, with the
        error line of its log, before any training starts."""
        what = f"{self.section} replica"
        if self.pool is None:
            raise ServerStartError(f"{self.section}: the first request goes to launched replicas, and none were")
        try:
            await check_servers(
                self.pool.urls,
                self.role,
                self.api_key,
                self.served_name,
                timeout_s,
                timeout_s,
                what,
                backend=self.backend,
                alive=self.pool.alive,
            )
        except ServerStartError:
            await asyncio.sleep(2.0)  # a dying engine takes its API server down within a second or two
            dead = [s.death() for s in self.pool.servers if not s.alive()]
            if dead:
                raise ServerStartError(f"{self.section}: {self.backend} failed its first request: {dead[0]}") from None
            raise

    @property
    def restarts(self) -> int:
        """Restarts of replicas (the router's are `router_restarts`)."""
        return self.pool.restarts if self.pool is not None else 0

    def router_down(self) -> bool:
        """Whether the router in front is dead or being restarted (False without one): send nothing to it."""
        return self.router is not None and (self._router_restarting or not self.router.alive())

    async def _watch_router(self, interval_s: float = 1.0) -> None:
        """Restart the router when its process died (run as a task beside the pool's supervisor; cancelled at
        close). A restart that fails is killed and tried again later, 2, 4, ... up to 60 s on."""
        wait_s, failing = interval_s, False  # a router that keeps failing to start is tried again less and less often
        while not self._closing:
            router = self.router
            if router is not None and not router.alive():
                if not failing:  # one death, one restart counted and said, however many tries it takes
                    self.router_restarts += 1
                    if self.router_counters is not None:
                        self.router_counters.restarted()
                    self.router_death = death_line(router)
                    print(
                        f"rlrm: the SGLang router died ({self.router_death}); restarting it on its port {router.port}",
                        file=sys.stderr,
                        flush=True,
                    )
                self._router_restarting = True
                try:
                    await asyncio.to_thread(self._restart_router, router)
                    wait_s, failing = interval_s, False
                except Exception as exc:  # any failure to start: killed, and tried again later
                    if not self._closing:
                        wait_s, failing = min(60.0, wait_s * 2), True
                        print(
                            f"rlrm: the SGLang router did not come back ({exc}); trying again in {wait_s:g} s",
                            file=sys.stderr,
                            flush=True,
                        )
                        await asyncio.to_thread(router.kill)
                finally:
                    self._router_restarting = False
            await asyncio.sleep(wait_s)

    def _restart_router(self, router: ServerProcess) -> None:
        """(a worker thread) The dead router again on its port, waited for until it routes to the replicas that
        are up (a replica being restarted registers once healthy, as at start)."""
        router.kill()  # what is left of its process group
        with self._router_lock:
            if self._closing:
                return
            router.launch()
        router.wait_ready()
        pool = self.pool
        up = [u for u in self.replica_urls if pool is None or (pool.alive(u) and u not in pool.restarting)]
        wait_for_workers(router, max(1, len(up)), self.spec.start_timeout_s)

    async def close(self) -> None:
        with self._router_lock:  # a router restart under way launches nothing from here on
            self._closing = True
        for task in (self._supervisor, self._router_watch):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._supervisor = self._router_watch = None
        if self.router is not None:
            await asyncio.to_thread(self.router.stop)
        if self.pool is not None:
            await asyncio.to_thread(self.pool.stop)
        if self.placer is not None:
            await asyncio.to_thread(self.placer.close)
            self.placer = None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the router colours its log lines, in a file too


def death_line(server: ServerProcess) -> str:
    """`exit code -9 (SIGKILL); log ends: ...` for a server process found dead: its exit code (the signal that
    killed it) and its last log line, uncoloured and cut to one line."""
    code = server.exit_code()
    signal_name = ""
    if code is not None and code < 0:
        try:
            signal_name = f" ({signal.Signals(-code).name})"
        except ValueError:
            pass
    tail = _ANSI.sub("", server.why(lines=1))[:300]
    return f"exit code {code}{signal_name}; log ends: {tail}"


def fleet_key(spec: FleetSpec, configured: str | None) -> str | None:
    """The servers' bearer key: the configured one (what `api_key_env` names); else, for servers the run launches,
    a fresh random key (held by the trainer and the servers' environment only). None for running `addresses`
    without a key, and for SGLang, which takes a key only on its command line, where every local user can read it."""
    if configured or spec.addresses or not backend_for(spec.backend).key_in_env:
        return configured
    return new_run_key()
