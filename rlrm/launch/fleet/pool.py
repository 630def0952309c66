"""A pool of server replicas owned by a run (any backend, any role): started together, supervised, stopped.

    pool = ServerPool(model_path, role="genrm", replicas=2, threads=1)
    pool.start(timeout_s=180)        # every replica healthy (readiness), or ServerStartError
    pool.urls                        # for the balancer or the router
    ...
    pool.stop()                      # in `finally`, by pid

`supervise()` restarts a replica whose process died, on the same port. A replica restarted with
`restart_args` (the policy's `--wait-for-weights`) answers /health only once `on_restart` has
given it what it must serve (the current weights), so neither the router nor the balancer
admits it before: a restarted policy replica never serves the base model.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Awaitable, Callable, Protocol, Sequence

from rlrm.launch.common import progress
from rlrm.launch.common.auth import ENV_VAR
from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.engine_argv import engine_argv, engine_device, engine_env
from rlrm.launch.fleet.process import ServerProcess, embedded_server_argv

MEMORY_FLAGS = ("--gpu-memory-utilization", "--mem-fraction-static")


class Replica(Protocol):
    """One replica as the pool and its supervisor drive it, wherever it runs: a local `ServerProcess`
    (rlrm/launch/fleet/process.py) or a `RayReplica` on a Ray node (rlrm/launch/fleet/ray_replicas.py)."""

    url: str  # http://host:port, the same across restarts
    argv: list[str]  # its command line; a gated restart appends `restart_args`
    start_timeout_s: float  # how long `wait_ready` and `wait_listening` wait

    def launch(self) -> None:
        """Start its process without waiting for it."""
        ...

    def wait_ready(self) -> None:
        """Until /health answers 200 (ServerStartError when it dies or the timeout passes)."""
        ...

    def wait_listening(self) -> None:
        """Until it answers HTTP at all (a replica gated on its first weights answers 503)."""
        ...

    def restart(self) -> None:
        """Launch it again on the same port and wait until it is ready."""
        ...

    def alive(self) -> bool:
        """Whether its process runs."""
        ...

    def death(self) -> str:
        """One line for a replica found dead: its URL, exit code and the cause its log gives."""
        ...

    def kill(self) -> None:
        """SIGKILL what is left of its process group."""
        ...

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period (teardown)."""
        ...


def replica_argv(
    backend: str,
    model_path: str,
    role: str,
    port: int,
    threads: int = 1,
    dtype: str = "float32",
    max_batch: int = 64,
    api_key: str | None = None,
    extra_args: list[str] | None = None,
    host: str = "127.0.0.1",
    served_model_name: str | None = None,
    device: str = "cpu",
    gpu_memory_utilization: float = 0.85,
) -> list[str]:
    """The command line of one replica (the argv `--dry-run` prints)."""
    if backend == "embedded":
        extra = ["--threads", str(threads), "--dtype", dtype, "--max-batch", str(max_batch)]
        if api_key:
            extra += ["--api-key-env", ENV_VAR]
        return embedded_server_argv(model_path, role, port, host=host, extra=extra + list(extra_args or []))
    argv = engine_argv(
        backend,
        model_path,
        role,
        port,
        host=host,
        dtype=dtype,
        max_batch=max_batch,
        api_key=api_key,
        served_model_name=served_model_name,
        device=device,
        # a share given in extra_args replaces the key's (not twice on one command line)
        gpu_memory_utilization=None if {*MEMORY_FLAGS} & {*(extra_args or [])} else gpu_memory_utilization,
    )
    return argv + list(extra_args or [])  # last: a flag given again in extra_args wins


class ServerPool:
    """Replicas of one model (see the module docstring).

    Args:
        placer: None: local subprocesses on free ports here. Else an object whose
            `place(n, make_argv(host, port), envs)` returns n `Replica`s, each on its own node
            (rlrm/launch/fleet/ray_replicas.py): the pool supervises them the same way.
    """

    def __init__(
        self,
        model_path: str,
        role: str,
        replicas: int = 1,
        threads: int = 1,
        dtype: str = "float32",
        max_batch: int = 64,
        api_key: str | None = None,
        backend: str = "embedded",
        gpu_ids: Sequence[int] | None = None,
        extra_args: list[str] | None = None,
        restart_args: list[str] | None = None,
        placer=None,
        served_model_name: str | None = None,
        gpu_memory_utilization: float = 0.85,
    ):
        device = engine_device(gpu_ids)
        envs = []
        for i in range(replicas):
            # the key travels in the environment, which only the owner can read; None: no inherited key either
            env = {ENV_VAR: api_key or None, **engine_env(backend, api_key, role, device)}
            if gpu_ids:
                env["CUDA_VISIBLE_DEVICES"] = str(gpu_ids[i % len(gpu_ids)])
            envs.append(env)

        def make_argv(host: str, port: int) -> list[str]:
            return replica_argv(
                backend,
                model_path,
                role,
                port,
                threads,
                dtype,
                max_batch,
                api_key,
                extra_args,
                host=host,
                served_model_name=served_model_name,
                device=device,
                gpu_memory_utilization=gpu_memory_utilization,
            )

        self.servers: list[Replica]
        if placer is None:
            self.servers = [ServerProcess(make_argv("127.0.0.1", free_port()), env=env) for env in envs]
        else:
            self.servers = placer.place(replicas, make_argv, envs)
        self.role, self.backend = role, backend  # named in progress lines
        self.restart_args = list(restart_args or [])
        self.restarts = 0
        self.restarting: set[str] = set()  # URLs of replicas being restarted (not to be synced directly)
        self.deaths: dict[str, str] = {}  # URL -> one line on its last death (exit code, cause, log tail)
        self._stopping = False

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def death(self, url: str) -> str | None:
        """Why the replica at `url` last died (one line with its log tail), or None: for errors that would
        otherwise only say that a connection was refused."""
        for server in self.servers:
            if server.url == url and not server.alive():
                return server.death()
        return self.deaths.get(url)

    def alive(self, url: str) -> bool:
        """Whether the process of the replica at `url` runs (restarting or not)."""
        return any(s.url == url and s.alive() for s in self.servers)

    def start(self, timeout_s: float = 180.0) -> None:
        """Start every replica at once, then wait for all of them (one total deadline)."""
        started = time.monotonic()
        progress.say(f"{self.role} servers: starting {len(self.servers)} {self.backend} replica(s)")
        try:
            for server in self.servers:
                server.start_timeout_s = timeout_s
                server.launch()
            deadline = time.monotonic() + timeout_s
            for server in self.servers:
                server.start_timeout_s = max(1.0, deadline - time.monotonic())
                log = getattr(server, "log_path", None)
                with progress.waiting(f"{self.role} replica {server.url} starting" + (f" (log: {log})" if log else "")):
                    server.wait_ready()
            progress.say(f"{self.role} servers: {len(self.servers)} ready in {time.monotonic() - started:.1f} s")
        except BaseException:
            self.stop()
            raise

    async def supervise(
        self, interval_s: float = 1.0, on_restart: Callable[[str], Awaitable[None]] | None = None
    ) -> None:
        """Restart replicas that died (run as a task; cancelled at shutdown).

        Args:
            on_restart: awaited with the replica's URL once its process is up again; a replica
                started with `restart_args` waits for it before it reports healthy. When it
                raises, the replica is killed again (never left half-ready) and retried next round.
        """
        while not self._stopping:
            # off the event loop: a replica on a Ray node answers over Ray (rlrm/launch/fleet/ray_replicas.py)
            alive = await asyncio.to_thread(lambda: [s.alive() for s in self.servers])
            for server, up in zip(self.servers, alive):
                if not up and not self._stopping:
                    self.restarts += 1
                    self.deaths[server.url] = death = server.death()
                    print(f"rlrm: server {death}; restarting it", file=sys.stderr, flush=True)
                    await self._restart(server, on_restart)
            await asyncio.sleep(interval_s)

    async def _restart(self, server: Replica, on_restart) -> None:
        await asyncio.to_thread(server.kill)  # what is left of its process group (a dead vLLM's engine core)
        gated = bool(self.restart_args) and on_restart is not None
        if gated and not server.argv[-len(self.restart_args) :] == self.restart_args:
            server.argv += self.restart_args
        self.restarting.add(server.url)
        try:
            if gated:  # up, but not healthy until it has its weights: wait for the process to listen
                await asyncio.to_thread(server.launch)
                await asyncio.to_thread(server.wait_listening)
                await on_restart(server.url)
                await asyncio.to_thread(server.wait_ready)
            else:
                await asyncio.to_thread(server.restart)
                if on_restart is not None:
                    await on_restart(server.url)
        except asyncio.CancelledError:
            server.kill()
            raise
        except Exception:
            server.kill()  # tried again on the next round; the balancer or router routes around it meanwhile
        finally:
            self.restarting.discard(server.url)

    def stop(self) -> None:
        self._stopping = True
        for server in self.servers:
            server.stop()
