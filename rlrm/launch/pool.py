"""A pool of embedded reward-server replicas owned by a run: started together, supervised, stopped.

    pool = ServerPool(model_path, role="genrm", replicas=2, threads=1)
    pool.start(timeout_s=180)        # every replica healthy (readiness), or ServerStartError
    pool.urls                        # for the balancer
    ...
    pool.stop()                      # in `finally`, by pid

`supervise()` restarts a replica whose process died, on the same port, so it rejoins the balancer
once its /health answers again.
"""

from __future__ import annotations

import asyncio
import time

from rlrm.launch.auth import ENV_VAR
from rlrm.launch.ports import free_port
from rlrm.launch.process import ServerProcess, ServerStartError, embedded_server_argv


class ServerPool:
    def __init__(self, model_path: str, role: str, replicas: int = 1, threads: int = 1, dtype: str = "float32",
                 max_batch: int = 64, api_key: str | None = None):
        self.servers: list[ServerProcess] = []
        extra = ["--threads", str(threads), "--dtype", dtype, "--max-batch", str(max_batch)]
        if api_key:
            extra += ["--api-key-env", ENV_VAR]
        # the key travels in the environment, which only the owner can read; None: no inherited key either
        env = {ENV_VAR: api_key or None}
        for _ in range(replicas):
            self.servers.append(ServerProcess(embedded_server_argv(model_path, role, free_port(), extra=extra), env=env))
        self.restarts = 0
        self._stopping = False

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def start(self, timeout_s: float = 180.0) -> None:
        """Start every replica at once, then wait for all of them (one total deadline)."""
        try:
            for server in self.servers:
                server.start_timeout_s = timeout_s
                server.launch()
            deadline = time.monotonic() + timeout_s
            for server in self.servers:
                server.start_timeout_s = max(1.0, deadline - time.monotonic())
                server.wait_ready()
        except BaseException:
            self.stop()
            raise

    async def supervise(self, interval_s: float = 1.0) -> None:
        """Restart replicas that died (run as a task; cancelled at shutdown)."""
        while not self._stopping:
            for server in self.servers:
                if not server.alive() and not self._stopping:
                    self.restarts += 1
                    try:
                        await asyncio.to_thread(server.restart)
                    except ServerStartError:
                        pass  # tried again on the next round; the balancer routes around it meanwhile
            await asyncio.sleep(interval_s)

    def stop(self) -> None:
        self._stopping = True
        for server in self.servers:
            server.stop()
