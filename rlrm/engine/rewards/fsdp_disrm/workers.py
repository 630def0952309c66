"""The legacy worker group: `world_size` ranks (processes) holding one FSDP2-sharded reward model.

    with LegacyWorkerGroup(LegacyConfig(model_path, dtype="bf16", world_size=2)) as group:
        out = group.score(ids, response_tokens)        # LegacyScores: token-level [B, T], seconds
        out.scores                                     # [B] in the compute dtype

The driver splits a batch as verl's DataProto dispatch did: padded to a multiple of the world size
(repeating samples from the start), one contiguous chunk per rank, the chunks' token-level scores
concatenated and the padding dropped. Ranks rendezvous over TCP on a free port (gloo on CPU, nccl
on GPU, one GPU per rank) and are owned here: started with the spawn method, stopped by their own
process objects in `close()` (always called: use `with`). World size 1 runs its one rank in this
process by default (same code, no spawn and model-load cost in a second process); `spawn=True`
forces a separate process.

World size and devices: on GPU a rank needs its own device, so more ranks than visible GPUs are
refused. On CPU a gloo rank is a process; more ranks than cores would measure contention rather
than sharding, so more than `os.cpu_count()` ranks are refused too, and by default each rank gets
cores // world_size torch threads.
"""

from __future__ import annotations

import math
import os
import queue
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from rlrm.engine.executor.mailbox import pack, receive, send, short_socket_folder
from rlrm.engine.executor.spawned import exit_when_orphaned, stop_spawned
from rlrm.engine.executor.world_size import check_world_size
from rlrm.engine.rewards.fsdp_disrm.config import LegacyConfig
from rlrm.errors import RlrmError
from rlrm.launch.common.ports import on_fresh_ports

if TYPE_CHECKING:
    import torch

    from rlrm.engine.rewards.fsdp_disrm.rank import LegacyRank


class LegacyScorerError(RlrmError):
    """A legacy rank failed to start or to score."""


@dataclass
class LegacyScores:
    token_level: torch.Tensor  # [B, T] in the compute dtype
    seconds: float  # wall time of the scoring call (model already loaded)

    @property
    def scores(self):
        """[B] scores read back from the token-level tensor, still in the compute dtype."""
        return self.token_level.sum(-1)


class LegacyWorkerGroup:
    def __init__(self, cfg: LegacyConfig, spawn: bool | None = None):
        check_world_size(cfg.world_size, cfg.device)
        if not cfg.threads and cfg.device == "cpu":
            cfg = replace(cfg, threads=max(1, (os.cpu_count() or 1) // cfg.world_size))
        self.cfg = cfg
        self.spawn = cfg.world_size > 1 if spawn is None else spawn
        self._local: LegacyRank | None = None  # the in-process rank
        self._procs: list = []
        self._inboxes: list = []
        self._outbox: Any = None  # the ranks' shared torch.multiprocessing queue, once spawned
        self._calls = 0  # each score call's number: a late answer to one that timed out is never another's

    def __enter__(self) -> LegacyWorkerGroup:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """Load and shard the model on every rank; return when all are ready. A rendezvous port another process
        took before rank 0 bound it (EADDRINUSE) is left for a fresh one, as the actor's ranks do
        (rlrm/engine/executor/rank_procs.py)."""
        on_fresh_ports(self._start_on, "the legacy DisRM ranks' rendezvous")

    def _start_on(self, port: int) -> None:
        try:
            if not self.spawn:
                self._local = _init_rank(self.cfg, 0, port)
                return
            import torch.multiprocessing as mp

            short_socket_folder()  # the scores come back as shared-memory tensors, over a Unix socket
            ctx = mp.get_context("spawn")
            self._outbox = ctx.Queue()
            for rank in range(self.cfg.world_size):
                inbox = ctx.Queue()
                proc = ctx.Process(target=_rank_main, args=(self.cfg, rank, port, inbox, self._outbox), daemon=True)
                proc.start()
                self._procs.append(proc)
                self._inboxes.append(inbox)
            self._collect("ready", self.cfg.start_timeout_s)
        except BaseException:
            self.close()
            raise

    def score(self, ids: list[list[int]], response_tokens: list[int]) -> LegacyScores:
        """Token-level scores of a batch, in input order."""
        import torch

        if not ids:
            raise ValueError("nothing to score")
        width = max(response_tokens)
        world = self.cfg.world_size
        per_rank = math.ceil(len(ids) / world)
        pad = per_rank * world - len(ids)
        ids_p = list(ids) + [ids[i % len(ids)] for i in range(pad)]
        tokens_p = list(response_tokens) + [response_tokens[i % len(ids)] for i in range(pad)]
        start = time.perf_counter()
        if not self.spawn:
            if self._local is None:
                raise LegacyScorerError("the legacy DisRM scores only after start()")
            token_level = self._local.score(ids_p, tokens_p, width)
        else:
            self._calls += 1
            chunks = [slice(rank * per_rank, (rank + 1) * per_rank) for rank in range(world)]
            jobs = [pack(("score", self._calls, ids_p[chunk], tokens_p[chunk], width)) for chunk in chunks]
            for inbox, job in zip(self._inboxes, jobs):
                inbox.put(job)
            shards = self._collect("scored", self.cfg.start_timeout_s, call=self._calls)
            token_level = torch.cat([shards[r] for r in range(world)])
        return LegacyScores(token_level[: len(ids)], time.perf_counter() - start)

    def _collect(self, kind: str, timeout_s: float, call: int = 0) -> dict:
        """One `kind` message of call `call` from every rank; a rank's error or death raises at once. Messages of an
        earlier call (one that timed out, whose ranks answered late) are dropped."""
        pending, got = set(range(len(self._procs))), {}
        deadline = time.monotonic() + timeout_s
        while pending:
            try:
                status, rank, payload = receive(self._outbox, timeout_s=0.2)
            except queue.Empty:
                for rank in sorted(pending):
                    code = self._procs[rank].exitcode
                    if code is not None:
                        raise LegacyScorerError(f"legacy rank {rank} exited with code {code} before it was {kind}")
                if time.monotonic() > deadline:
                    raise LegacyScorerError(
                        f"legacy ranks {sorted(pending)} not {kind} after {timeout_s:g} s"
                    ) from None
                continue
            answered, payload = payload
            if answered != call:
                continue
            if status == "error":
                raise LegacyScorerError(f"legacy rank {rank}: {payload}")
            got[rank] = payload
            pending.discard(rank)
        return got

    def close(self) -> None:
        """Stop every rank (by its own process object) and leave no process group behind."""
        if self._local is not None:
            _destroy_group()
            self._local = None
        stop_spawned(self._procs, self._inboxes)
        self._procs, self._inboxes = [], []


def _init_rank(cfg: LegacyConfig, rank: int, port: int) -> LegacyRank:
    """Join the process group and build the rank's sharded model."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from rlrm.engine.rewards.fsdp_disrm.rank import LegacyRank

    if dist.is_initialized():
        raise LegacyScorerError(
            "a torch.distributed process group already exists in this process; score with spawn=True"
        )
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.device == "cuda":
        torch.cuda.set_device(rank)
    backend = "nccl" if cfg.device == "cuda" else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=cfg.world_size,
        timeout=timedelta(seconds=cfg.start_timeout_s),
    )
    try:
        return LegacyRank(cfg, rank)
    except BaseException:
        _destroy_group()
        raise


def _destroy_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def _rank_main(cfg: LegacyConfig, rank: int, port: int, inbox, outbox) -> None:
    """A spawned rank: set up, then score what arrives until None."""
    import signal
    import threading

    # Ctrl-C and a scheduler's SIGTERM to the group are the parent's to handle (rlrm/engine/executor/rank_procs.py)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # the parent killed with -9 sends no stop: the ranks, and the model they hold, would stay for good
    threading.Thread(target=exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
    short_socket_folder()
    try:
        worker = _init_rank(cfg, rank, port)
    except BaseException as exc:
        send(outbox, ("error", rank, (0, _one_line(exc))))
        return
    send(outbox, ("ready", rank, (0, None)))
    try:
        while (job := receive(inbox, timeout_s=None)) is not None:
            _, call, ids, tokens, width = job
            try:
                send(outbox, ("scored", rank, (call, worker.score(ids, tokens, width))))
            except Exception as exc:
                send(outbox, ("error", rank, (call, _one_line(exc))))
                return
    finally:
        _destroy_group()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    if isinstance(exc, RlrmError) and text:
        return text[0]
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
