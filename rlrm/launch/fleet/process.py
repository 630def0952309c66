"""Owned server processes: started from an argv list in their own process group, waited for with
a total timeout, stopped by their own pid (never by name).

    with ServerProcess(embedded_server_argv("tiny:policy", "genrm", port)) as server:
        httpx.get(server.url + "/health")
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlrm.errors import RlrmError


class ServerStartError(RlrmError):
    """A server did not become healthy in time, or exited while starting."""


def embedded_server_argv(
    model: str, role: str, port: int, host: str = "127.0.0.1", extra: list[str] | None = None
) -> list[str]:
    """The command line of an embedded server."""
    return [
        sys.executable,
        "-m",
        "rlrm.launch.server",
        "--model",
        model,
        "--role",
        role,
        "--host",
        host,
        "--port",
        str(port),
        *(extra or []),
    ]


# Run in front of every server's argv (exec'd in place, same pid): a watchdog kills the server's process group
# when the process that launched it dies, SIGKILL included (see that file for how and why).
_GUARD = str(Path(__file__).with_name("die_with_parent.py"))
_LOG_PREFIX = "rlrm-server-"
_swept_logs = False


def sweep_dead_logs(folder: Path | None = None) -> int:
    """Delete server logs whose launching process is gone (their names carry its pid); returns how many.

    Run once per process before its first server starts: the logs of a run killed with -9 are removed
    by the next run on the machine, never those of a run still alive."""
    removed = 0
    for path in Path(folder or tempfile.gettempdir()).glob(f"{_LOG_PREFIX}*.log"):
        owner = path.name[len(_LOG_PREFIX) :].split("-", 1)[0]
        if not owner.isdigit():
            continue  # not named by a launcher's pid (an older rlrm's): not ours to judge
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
            removed += 1
        except PermissionError:
            pass  # alive, another user's
    return removed


class ServerProcess:
    """A server subprocess with readiness polling and teardown in `finally`."""

    def __init__(
        self,
        argv: list[str],
        host: str = "127.0.0.1",
        port: int | None = None,
        health_path: str = "/health",
        start_timeout_s: float = 120.0,
        env: dict | None = None,
        die_with_parent: bool = True,
    ):
        self.argv = list(argv)
        self.die_with_parent = die_with_parent  # killed with its launcher: nothing outlives a run (kill -9 too)
        self.port = port if port is not None else int(argv[argv.index("--port") + 1])
        self.url = f"http://{host}:{self.port}"
        self.health_path, self.start_timeout_s = health_path, start_timeout_s
        self.env = env
        self.proc: subprocess.Popen | None = None
        self._log = None

    def start(self) -> "ServerProcess":
        """Launch and wait until healthy (stopping it again if it never gets there)."""
        self.launch()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def launch(self) -> None:
        """Start the process without waiting for it."""
        global _swept_logs
        if not _swept_logs:
            _swept_logs = True
            sweep_dead_logs()
        if self._log is None:
            prefix = f"{_LOG_PREFIX}{os.getpid()}-"  # the launcher's pid: sweep_dead_logs tells a dead run's logs
            self._log = tempfile.NamedTemporaryFile(prefix=prefix, suffix=".log", delete=False)
        env = {**os.environ, **(self.env or {})}
        guard = self.die_with_parent and sys.platform == "linux"
        self.proc = subprocess.Popen(
            [sys.executable, _GUARD, str(os.getpid()), *self.argv] if guard else self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group
            env={k: v for k, v in env.items() if v is not None},  # None in `env` removes an inherited variable
        )

    def restart(self) -> None:
        """Start a dead server again on the same port and wait for it."""
        self.launch()
        self.wait_ready()

    def wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"server exited with code {self.proc.returncode} while starting: {self.log_tail()}"
                )
            try:
                if httpx.get(self.url + self.health_path, timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise ServerStartError(
            f"server at {self.url} not healthy after {self.start_timeout_s:.0f} s; its log ends: {self.log_tail()}"
        )

    def wait_listening(self) -> None:
        """Wait until the server answers HTTP at all (any status: a gated /health answers 503)."""
        import httpx

        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"server exited with code {self.proc.returncode} while starting: {self.log_tail()}"
                )
            try:
                httpx.get(self.url + self.health_path, timeout=2.0)
                return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise ServerStartError(
            f"server at {self.url} not listening after {self.start_timeout_s:.0f} s: {self.log_tail()}"
        )

    def log_tail(self, lines: int = 5) -> str:
        if self._log is None:
            return ""
        text = Path(self._log.name).read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:]) or "(empty log)"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """Kill the whole process group at once (a crash, for fault tests)."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after `grace_s`."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass
        if self._log is not None:
            self._log.close()
            Path(self._log.name).unlink(missing_ok=True)
            self._log = None

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
