"""A pool of server replicas owned by a run (any backend, any role): started together, supervised, stopped.

    pool = ServerPool(ReplicaLaunch.of(spec, role="genrm", model_path=path), replicas=2)
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
from typing import Awaitable, Callable, Protocol

from rlrm.launch.common import progress
from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.backends import ReplicaLaunch
from rlrm.launch.fleet.process import ServerProcess


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


class ServerPool:
    """Replicas of one model (see the module docstring).

    Args:
        launch: what every replica is started with (rlrm/launch/fleet/backends.py).
        replicas: how many.
        restart_args: appended to a replica's argv when the supervisor restarts it gated on `on_restart`.
        placer: None: local subprocesses on free ports here. Else an object whose
            `place(n, make_argv(host, port), envs)` returns n `Replica`s, each on its own node
            (rlrm/launch/fleet/ray_replicas.py): the pool supervises them the same way.
    """

    def __init__(
        self,
        launch: ReplicaLaunch,
        replicas: int = 1,
        restart_args: list[str] | None = None,
        placer=None,
    ):
        envs = [launch.env(i) for i in range(replicas)]
        self.servers: list[Replica]
        if placer is None:
            # a move to a fresh port, should another process take this one first, changes only its --port
            self.servers = [ServerProcess.movable(launch.argv("127.0.0.1", free_port()), env=env) for env in envs]
        else:
            self.servers = placer.place(replicas, launch.argv, envs)
        self.role, self.backend = launch.role, launch.backend  # named in progress lines
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
