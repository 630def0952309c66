"""Owned server processes: started from an argv list in their own process group, waited for with
a total timeout, stopped by their own pid (never by name).

    with ServerProcess(embedded_server_argv("tiny:policy", "genrm", port)) as server:
        http.get(server.url + "/health", timeout_s=2.0).status
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from rlrm.call_errors import TransientError
from rlrm.errors import RlrmError, require_extra
from rlrm.launch.common import http
from rlrm.launch.common.no_proxy import direct_loopback
from rlrm.launch.common.ports import free_port, port_taken


class ServerStartError(RlrmError):
    """A server did not become healthy in time, or exited while starting."""


# "ValueError: ..." at the start of a line or after a process prefix such as vLLM's "(EngineCore_DP0 pid=7) "
_ERROR_LINE = re.compile(r"(?:^|\) |\] )((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Exit)): (.+)$")
# a key as an engine may print it (SGLang logs its server_args, api_key='...' among them); the values rlrm knows
# (`_secrets`) are replaced wherever they appear
# (a whole name, prefixes included: OPENAI_API_KEY, x-api-key, --hf-token; not a part of one: SGLang's batch lines
# say `#new-token: 6`, which is no key), and a bearer token
_KEY_FIELD = re.compile(
    r"""(?<![\w#-])([-\w]*?(?:api[_-]?key|token|secret|password)['"]?\s*[=:]\s*['"]?)([^'"\s,)]+)"""
    r"""|(\bbearer\s+)([\w.~+/-]+=*)""",
    re.IGNORECASE,
)
_KEY_FLAGS = ("--api-key", "--api_key")
_MASK = "<key hidden>"
# lines that only point at another error (vLLM's front end after its engine core failed)
_RELAYS = ("See root cause above", "Engine core initialization failed", "EngineDeadError", "EngineCore encountered")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # terminal colour and style codes


def cause_line(text: str) -> str | None:
    """The first `SomeError: message` line of a log that is not a mere relay of another one (the root cause
    comes first in a chain of tracebacks), else None."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = _ERROR_LINE.search(line.strip())
        if match and not any(r in line for r in _RELAYS):
            cause = f"{match.group(1)}: {match.group(2)}"
            if "validation error" in cause:  # pydantic puts what is wrong on the next lines (vLLM's config checks)
                cause += ": " + " ".join(x.strip() for x in lines[i + 1 : i + 3])
            return cause[:400]
    return None


def _secrets_of(argv: list[str], env: dict | None) -> list[str]:
    """The keys a server is given: the value of --api-key on its argv, and any *KEY* / *TOKEN* in its env."""
    found = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg in _KEY_FLAGS]
    found += [arg.partition("=")[2] for arg in argv if arg.startswith(tuple(f + "=" for f in _KEY_FLAGS))]
    found += [v for k, v in (env or {}).items() if ("KEY" in k.upper() or "TOKEN" in k.upper()) and isinstance(v, str)]
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


def with_port(argv: list[str], port: int) -> list[str]:
    """`argv` with the value of its last `--port` replaced (a command line rlrm built, on another port)."""
    i = len(argv) - 1 - argv[::-1].index("--port")
    return [*argv[: i + 1], str(port), *argv[i + 2 :]]


def embedded_server_argv(
    model: str, role: str, port: int, host: str = "127.0.0.1", extra: list[str] | None = None
) -> list[str]:
    """The command line of an embedded server (refused in one line where the `serve` extra is missing)."""
    for module in ("fastapi", "uvicorn"):
        require_extra(module, "serve", "an embedded server")
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
            try:
                path.unlink(missing_ok=True)
            except PermissionError:  # another user's, in a sticky /tmp: theirs to remove
                continue
            removed += 1
        except PermissionError:
            pass  # alive, another user's
    return removed


# how a server says that another process bound its port first: rlrm's own check (rlrm/launch/common/ports.py),
# uvicorn and vLLM (OSError errno 98), sglang-router (Rust's "os error 98")
_PORT_LOST = re.compile(r"address already in use|errno 98|os error 98|port \d+ on \S+ is in use", re.IGNORECASE)
_MOVES = 3  # fresh ports tried before a lost port is reported


class ServerProcess:
    """A server subprocess with readiness polling and teardown in `finally`.

    A port rlrm picks is free when picked, not when the server binds it, seconds later (after loading a model):
    on a busy machine another process can take it between the two. `ServerProcess.on_free_port(argv_on)` picks
    the port and knows how to make the command line for another one: a server that exits while starting because
    its port was taken is started again on a fresh port, and its `url` changes (read it after `start`). A
    server started once keeps its port: a restart goes back to the address its clients know.
    """

    def __init__(
        self,
        argv: list[str],
        host: str = "127.0.0.1",
        port: int | None = None,
        health_path: str = "/health",
        start_timeout_s: float = 120.0,
        env: dict | None = None,
        die_with_parent: bool = True,
        argv_on: Callable[[int], list[str]] | None = None,
    ):
        self.argv = list(argv)
        self.argv_on = argv_on  # the argv on another port: set where rlrm picked the port (see the class)
        self.moves: list[int] = []  # the ports lost to other processes while starting, in order
        self._served = False  # became ready once: its URL is known to clients and stays
        self.die_with_parent = die_with_parent  # killed with its launcher: nothing outlives a run (kill -9 too)
        self.port = port if port is not None else int(argv[argv.index("--port") + 1])
        self.host = host
        self.url = f"http://{host}:{self.port}"
        self.health_path, self.start_timeout_s = health_path, start_timeout_s
        self.env = env
        self._secrets = _secrets_of(self.argv, env)  # never shown in an error line (SGLang's key is on its argv)
        self.proc: subprocess.Popen | None = None
        self._log: tempfile._TemporaryFileWrapper[bytes] | None = None

    @classmethod
    def on_free_port(cls, argv_on: Callable[[int], list[str]], host: str = "127.0.0.1", **kwargs) -> "ServerProcess":
        """A server on a port free now, started again on a fresh one if another process takes it first."""
        port = free_port(host)
        return cls(argv_on(port), host=host, port=port, argv_on=argv_on, **kwargs)

    @classmethod
    def movable(cls, argv: list[str], **kwargs) -> "ServerProcess":
        """A server on the port of its argv's `--port`, which rlrm picked: moved as `on_free_port` says."""
        return cls(argv, argv_on=partial(with_port, argv), **kwargs)

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
        """Start the process without waiting for it (ServerStartError when something else holds its port:
        readiness would otherwise be read from that other server)."""
        global _swept_logs
        if not _swept_logs:
            _swept_logs = True
            sweep_dead_logs()
        while port_taken(self.host, self.port):
            argv_on = self._mover()
            if argv_on is None:
                raise ServerStartError(
                    f"port {self.port} on {self.host} is in use by another process; {self.argv[0]} not started"
                )
            self._repick(argv_on)
        if self._log is None:
            prefix = f"{_LOG_PREFIX}{os.getpid()}-"  # the launcher's pid: sweep_dead_logs tells a dead run's logs
            self._log = tempfile.NamedTemporaryFile(prefix=prefix, suffix=".log", delete=False)
        env = {**os.environ, **(self.env or {})}
        direct_loopback(env)  # a router's health checks of its 127.0.0.1 replicas went to the shell's HTTP_PROXY
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
        if self.proc is None:
            raise ServerStartError(f"server at {self.url} is waited for but was never launched")
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.exit_code() is not None:
                if self._move_port():
                    continue
                raise ServerStartError(f"server exited with code {self.exit_code()} while starting: {self.why()}")
            try:
                if http.get(self.url + self.health_path, timeout_s=2.0).status == 200:
                    self._served = True
                    return
            except TransientError:
                pass
            time.sleep(0.2)
        raise ServerStartError(
            f"server at {self.url} not healthy after {self.start_timeout_s:.0f} s; its log ends: {self.log_tail()}"
        )

    def _move_port(self) -> bool:
        """Launch the exited server again on a fresh port when another process took its port while it started
        (see the class); False when it may not move or died of something else."""
        argv_on = self._mover()
        if argv_on is None:
            return False
        # its error line, or its last lines: an earlier line on a port of its own (a c10d store) is not the cause
        if not _PORT_LOST.search(f"{cause_line(self._log_text()) or ''} {self.log_tail()}"):
            return False
        self.kill()  # what is left of its process group (an engine's workers): nothing outlives a move
        if self._log is not None:  # the dead process's lines: its cause is known and must not be read again
            self._log.truncate(0)
            self._log.seek(0)
        self._repick(argv_on)
        self.launch()
        return True

    def _mover(self) -> Callable[[int], list[str]] | None:
        """`argv_on` while the server may still move to another port (see the class), else None."""
        return self.argv_on if not self._served and len(self.moves) < _MOVES else None

    def _repick(self, argv_on: Callable[[int], list[str]]) -> None:
        lost, self.port = self.port, free_port(self.host)
        self.moves.append(lost)
        self.argv, self.url = argv_on(self.port), f"http://{self.host}:{self.port}"
        print(
            f"rlrm: another process took port {lost} before the server there bound it; starting it on port {self.port}",
            file=sys.stderr,
            flush=True,
        )

    def wait_listening(self) -> None:
        """Wait until the server answers HTTP at all (any status: a gated /health answers 503)."""
        if self.proc is None:
            raise ServerStartError(f"server at {self.url} is waited for but was never launched")
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.exit_code() is not None:
                if self._move_port():  # as in wait_ready: a movable server that lost its port starts on another
                    continue
                raise ServerStartError(f"server exited with code {self.exit_code()} while starting: {self.why()}")
            try:
                http.get(self.url + self.health_path, timeout_s=2.0)
                self._served = True  # it answers here: clients may hold this address from now on
                return
            except TransientError:
                time.sleep(0.2)
        raise ServerStartError(
            f"server at {self.url} not listening after {self.start_timeout_s:.0f} s: {self.log_tail()}"
        )

    def log_tail(self, lines: int = 5) -> str:
        text = self._log_text().strip().splitlines()
        return " | ".join(line.strip() for line in text[-lines:]) or "(empty log)"

    def why(self, lines: int = 3) -> str:
        """Why the process stopped, in one line: its error line when its log has one, then the log's last lines."""
        cause = cause_line(self._log_text())
        tail = self.log_tail(lines)
        return f"{cause} (log ends: {tail})" if cause else tail

    def death(self) -> str:
        """One line for a process found dead: exit code, cause and log tail."""
        return f"{self.url} died (exit code {self.exit_code()}): {self.why()}"

    @property
    def log_path(self) -> str | None:
        """The file the server's output goes to (None before it starts)."""
        return self._log.name if self._log is not None else None

    def _log_text(self) -> str:
        """The server's output so far, with any key it printed hidden: a tail of it goes into error lines."""
        if self._log is None:
            return ""
        text = _ANSI.sub("", Path(self._log.name).read_text(errors="replace"))  # a Rust router colours its log
        for secret in self._secrets:
            text = text.replace(secret, _MASK)
        return _KEY_FIELD.sub(lambda m: (m.group(1) or m.group(3)) + _MASK, text)

    def alive(self) -> bool:
        return self.proc is not None and self.exit_code() is None

    def exit_code(self) -> int | None:
        """The leader's exit code (-N: killed by signal N) once it exited, None while it runs. Never reaps it: an
        unreaped leader's pid, the number of its process group, cannot be handed to another process, so `kill`
        can signal the group safely until `kill` itself reaps it (`poll()` reaped it, and `killpg` on a reused
        number once SIGKILLed whoever had it next)."""
        if self.proc is None or self.proc.returncode is not None:
            return None if self.proc is None else self.proc.returncode
        try:
            info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except (ChildProcessError, AttributeError):  # reaped by another waiter; no waitid (not Linux)
            return self.proc.poll()
        if info is None:
            return None
        return -info.si_status if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else info.si_status

    def kill(self) -> None:
        """Kill the whole process group at once (a crash, for fault tests; a dead engine's leftover workers)."""
        if self.proc is None:
            return
        if self.proc.returncode is None:  # not reaped: the group's number is still this server's
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the group outlives a dead leader (vLLM's engine core)
            except ProcessLookupError:
                pass
        self.proc.wait()

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after `grace_s`."""
        if self.proc is not None and self.alive():
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + grace_s
            while self.exit_code() is None and time.monotonic() < deadline:  # not reaped: see exit_code
                time.sleep(0.05)
        self.kill()  # whatever of its group is left
        if self._log is not None:
            self._log.close()
            Path(self._log.name).unlink(missing_ok=True)
            self._log = None

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
