"""Training ranks as processes on this machine (torch.multiprocessing, spawn), owned by the trainer.

    ranks = RankProcesses(spec)                       # spec.world_size ranks
    ranks.start()                                     # process group up, models sharded (or RankError)
    outs = ranks.call("train", [(shard_0, sizes), (shard_1, sizes)])   # one result per rank, in rank order
    ranks.close()                                     # always (by the processes' own objects)

Each rank runs the worker its spec names (`spec.worker_class()`: the actor's `RankWorker`, rlrm/engine/actor/rank.py;
the executor never imports it), answering calls from its own queue; the
group rendezvouses over TCP on a free local port. A call waits for every rank, and watches them:
a rank that exits (killed, out of memory) fails the call at once with a RankError naming the rank,
its node and its exit code, and the group refuses further calls (the survivors may be stuck in a
collective; `close` ends them). A rank that raises fails the call with its error; a TrainingError
raised on the ranks (too many non-finite steps) comes back as a TrainingError.
"""

from __future__ import annotations

import queue
import signal
import socket
import threading
import time
from typing import Any

from rlrm.engine.executor.mailbox import pack, receive, send, short_socket_folder
from rlrm.engine.executor.spawned import exit_when_orphaned, stop_spawned
from rlrm.errors import TrainingError
from rlrm.launch.common.ports import on_fresh_ports

# Seconds a failed call waits for a rank's exit to show, so a dead rank is named instead of the
# survivor whose collective broke when it died.
_DEATH_GRACE_S = 2.0


class RankError(TrainingError):
    """A training rank died, could not start, or failed a call."""


def describe(exc: BaseException) -> tuple[str, str]:
    """(kind, one line) of an exception raised on a rank."""
    lines = str(exc).strip().splitlines()
    return type(exc).__name__, (lines[0] if lines else type(exc).__name__)


def raise_rank_error(rank: int, node: str, method: str, kind: str, message: str) -> None:
    """Raise a rank's error here: TrainingError stays one (its message is the actor's), others name the rank."""
    if kind == "TrainingError":
        raise TrainingError(message)
    raise RankError(f"actor rank {rank} on node {node} failed in {method}: {kind}: {message}")


STARTING = ("setup", "address")  # the calls before a rank holds its shard of the models


def dead_rank_line(what: str, method: str) -> str:
    """The line for a rank found dead (`what`: "rank R on node H died (...)") during `method`: one that dies while
    the ranks start has no checkpoint of this start to point to."""
    if method in STARTING:
        return (
            f"actor {what} while the ranks were starting ({method}); the run stops before its first step: the "
            "rank's own error, when it printed one, is in the lines above"
        )
    return (
        f"actor {what} during {method}; the run stops here. Its checkpoints are intact: continue from the last "
        "with `rlrm train --resume RUN_DIR` (a run that wrote none starts again)"
    )


def exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class RankProcesses:
    """`spec.world_size` spawned rank processes (see the module docstring)."""

    def __init__(self, spec):
        self.spec = spec
        self.world_size = spec.world_size
        self.nodes = [socket.gethostname()] * spec.world_size
        self._procs: list = []
        self._inboxes: list = []
        self._outbox: Any = None  # the ranks' shared multiprocessing queue, once spawned
        self.broken: str | None = None  # why the group stopped serving
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the ranks and wait (up to actor.collective_timeout_s) until each has its shard of the models.

        Their rendezvous port is free when picked, not when rank 0 binds it after the ranks' start: another process
        that takes it between the two fails rank 0 with EADDRINUSE, and the ranks are started again on a fresh
        port (at most 3 times), as a server that lost its port is (rlrm/launch/fleet/process.py)."""
        on_fresh_ports(self._start_on, "the actor ranks' rendezvous")

    def _start_on(self, port: int) -> None:
        import torch.multiprocessing as mp

        self.broken = None  # a start that lost its port to another process is not a break
        timeout = self.spec.profile.actor.collective_timeout_s
        short_socket_folder()  # tensors pass over a Unix socket: a long TMPDIR would fail every call
        ctx = mp.get_context("spawn")
        self._outbox = ctx.Queue()
        try:
            for rank in range(self.world_size):
                inbox = ctx.Queue()
                proc = ctx.Process(target=_rank_main, args=(self.spec, rank, port, inbox, self._outbox), daemon=True)
                proc.start()
                self._procs.append(proc)
                self._inboxes.append(inbox)
            self.nodes = self._collect("setup", timeout)
        except BaseException:
            self.close()
            raise

    def call(self, method: str, args: list[tuple]) -> list:
        """Run `method(*args[r])` on every rank r; their results in rank order."""
        with self._lock:  # one call at a time: every rank must see the calls in the same order
            if self.broken:
                raise RankError(f"the actor ranks stopped after an earlier failure ({self.broken})")
            # all pickled before any is put: a rank never starts a call (and its collectives) that another misses
            jobs = [pack((method, rank_args)) for rank_args in args]
            for inbox, job in zip(self._inboxes, jobs):
                inbox.put(job)
            return self._collect(method, None)

    def call_all(self, method: str, *args) -> list:
        """`call` with the same arguments on every rank."""
        return self.call(method, [args] * self.world_size)

    def _collect(self, method: str, timeout_s: float | None) -> list:
        pending, got = set(range(self.world_size)), {}
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while pending:
            try:
                status, rank, payload = receive(self._outbox, timeout_s=0.2)
            except queue.Empty:
                self._raise_if_dead(method)
                if deadline is not None and time.monotonic() > deadline:
                    self.broken = f"ranks {sorted(pending)} not done with {method} after {timeout_s:g} s"
                    raise RankError(
                        f"actor {self.broken}; raise actor.collective_timeout_s if the model is large"
                    ) from None
                continue
            if status == "error":
                self._raise_if_dead(method, grace_s=_DEATH_GRACE_S)
                self.broken = f"rank {rank} failed in {method}"
                raise_rank_error(rank, self.nodes[rank], method, *payload)
            got[rank] = payload
            pending.discard(rank)
        return [got[r] for r in range(self.world_size)]

    def _raise_if_dead(self, method: str, grace_s: float = 0.0) -> None:
        """RankError for the first rank found exited (a rank that fails a call stays up until closed, so an exit is a
        death), waiting up to `grace_s` for one to show."""
        end = time.monotonic() + grace_s
        while True:
            for rank, proc in enumerate(self._procs):
                if proc.exitcode is not None:
                    self.broken = f"rank {rank} on node {self.nodes[rank]} died ({exit_text(proc.exitcode)})"
                    raise RankError(dead_rank_line(self.broken, method))
            if time.monotonic() >= end:
                return
            time.sleep(0.1)

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def close(self) -> None:
        """Stop every rank (by its own process object): ask, then terminate, then kill."""
        stop_spawned(self._procs, self._inboxes, grace_s=5.0 if not self.broken else 0.5)
        self._procs, self._inboxes = [], []


def _rank_main(spec, rank: int, port: int, inbox, outbox) -> None:
    """A spawned rank: set up, then run the calls that arrive until None."""
    import os

    # a terminal's Ctrl-C reaches every process of its group, and so does a scheduler's SIGTERM (scancel, `timeout`,
    # `kill -TERM -PGID`): the trainer decides (it saves through the ranks, then stops them by their inbox, SIGKILL
    # after a grace); a rank that died of it took the run's interrupt checkpoint with it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = os.getppid()
    short_socket_folder()
    # a rank busy in a call (a collective, a load) when the trainer is killed would wait out its timeout: exit
    threading.Thread(target=exit_when_orphaned, args=(parent,), daemon=True).start()
    worker = spec.worker_class()(spec)
    try:
        try:
            node = worker.setup(rank, rank, "127.0.0.1", port)
        except BaseException as exc:  # noqa: BLE001 - reported to the trainer, which raises it
            send(outbox, ("error", rank, describe(exc)))
            while _next_job(inbox, parent) is not None:  # up until told to stop: an exit would read as a death
                pass
            return
        send(outbox, ("ok", rank, node))
        while (job := _next_job(inbox, parent)) is not None:
            method, args = job
            try:  # the answer is pickled here: one that cannot be sent is this call's error, not a lost message
                answer = pack(("ok", rank, getattr(worker, method)(*args)))
            except Exception as exc:  # noqa: BLE001 - reported; the rank stays up so that only a death reads as one
                answer = pack(("error", rank, describe(exc)))
            outbox.put(answer)
    finally:
        worker.close()


def _next_job(inbox, parent: int):
    """The next call, or None when told to stop or when the trainer is gone (killed: no rank outlives it)."""
    import os

    while True:
        try:
            return receive(inbox, timeout_s=1.0)
        except queue.Empty:
            if os.getppid() != parent:
                return None
