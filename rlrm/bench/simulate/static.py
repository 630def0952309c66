"""rlrm's hf engine as a cost model: static batches, and a device it may share with the trainer.

    engine = StaticEngine(spec.rollout, gen_done, version)   # see engines.py for the shared interface
    engine.trainer_work(t, seconds)                          # shared device: the trainer computes too
    engine.trainer_end                                       # when that work is done, as planned now

An engine takes up to `max_running` queued requests (waiting `batch_wait_s` for more while fewer
are there), decodes them until the longest is done and returns them together; a weight sync
waits for the running batch (the engine and the sync share a lock) and no batch starts during it.

With `colocated_slowdown` > 1 the engine decodes on the trainer's device (rlrm's hf engine runs
in the trainer's process, on its CPU cores or GPU): while a batch decodes and the trainer
computes, both advance `colocated_slowdown` times slower (2: they split the device evenly).
Each event (arrival, sync, trainer work) moves the plan forward to its time and plans again.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import numpy as np

from rlrm.bench.simulate.engines import _Engine


@dataclass
class _Chunk:
    arrival: float
    ids: np.ndarray  # flat sample ids (row-major in [steps, N])


@dataclass
class _Batch:
    start: float
    work: float  # seconds alone on the device
    chunks: list[_Chunk]
    left: float = 0.0  # work still to do at the replica's reference time
    end: float = math.inf


@dataclass
class _Replica:
    queue: list[_Chunk] = field(default_factory=list)  # requests not in a started batch, FIFO
    running: _Batch | None = None  # the batch decoding at `t`
    t: float = 0.0  # reference time of `running.left` and the engine's trainer work
    locked_until: float = 0.0  # end of the last weight sync
    started: bool = False  # a batch has started (the first one carries the warm-up)
    plan: list[_Batch] = field(default_factory=list)  # running and queued batches, as planned at `t`
    segments: list[tuple[float, float, int, bool]] = field(
        default_factory=list
    )  # (t0, t1, batch in plan or -1, trainer on)


class StaticEngine(_Engine):
    """rlrm's hf engine: batches of queued requests, each decoded to its longest and returned whole."""

    def __init__(self, rollout, gen_done, version, tool_s=None):
        super().__init__(rollout, gen_done, version, tool_s)
        self.reps = [_Replica() for _ in range(self.replicas)]
        self._syncs: list[tuple[float, int]] = [(-math.inf, 0)]  # (end, version) of every weight sync
        self._prompt = np.zeros(gen_done.size)  # prompt tokens per sample (flat), for batch costs
        self._resp = np.zeros(gen_done.size)
        self.slowdown = rollout.colocated_slowdown
        self.shared = self.slowdown > 1
        self.trainer_left = 0.0  # the trainer's work in progress (seconds alone), at reps[0].t
        self.trainer_end = math.inf

    def arrive(self, t: float, k: int, prompt_len: np.ndarray, resp_len: np.ndarray) -> None:
        ids = (k - 1) * self.width + np.arange(len(resp_len))
        self._prompt[ids], self._resp[ids] = prompt_len, resp_len
        replica = self._assign(len(ids))
        for r, rep in enumerate(self.reps):
            mine = ids[replica == r]
            if mine.size:
                self._advance(r, t)
                rep.queue.append(_Chunk(t, mine))
                self._project(r)

    def sync(self, t: float, seconds: float, version: int) -> float:
        end = t
        for r, rep in enumerate(self.reps):
            self._advance(r, t)
            busy_until = t + (rep.running.left if rep.running else 0.0)  # the running batch holds the lock
            rep.locked_until = busy_until + seconds
            end = max(end, rep.locked_until)
        self._syncs.append((end, version))
        for r in range(self.replicas):
            self._project(r)
        return end

    def trainer_work(self, t: float, seconds: float) -> None:
        """The trainer starts `seconds` of work on the shared device at t (see `trainer_end`)."""
        self._advance(0, t)
        self.trainer_left = seconds
        self._project(0)

    def trainer_done(self, t: float) -> None:
        self._advance(0, t)
        self.trainer_left = 0.0
        self._project(0)

    def _work(self, ids: np.ndarray, first: bool) -> float:
        cfg = self.cfg
        return (
            cfg.batch_overhead_s
            + cfg.prefill_s_per_token * self._prompt[ids].sum()
            + cfg.iteration_s * self._resp[ids].max()
            + cfg.iteration_s_per_seq * self._resp[ids].sum()
            + (cfg.first_batch_extra_s if first else 0.0)
        )

    def _project(self, r: int) -> None:
        """Plan replica r from its reference time on; write its requests' finish times and versions."""
        rep, cfg, f = self.reps[r], self.cfg, self.slowdown
        shared = self.shared and r == 0
        now, y = rep.t, (self.trainer_left if shared else 0.0)
        segments, queue = [], list(rep.queue)
        plan: list = []
        trainer_end = now if y <= 0 else math.inf
        running, first = rep.running, not rep.started

        def trainer_alone(until: float) -> None:
            nonlocal y, trainer_end
            if y > 0 and until > now:
                step = min(y, until - now)
                segments.append((now, now + step, -1, True))
                y -= step
                if y <= 1e-12:
                    y, trainer_end = 0.0, now + step

        while running is not None or queue:
            if running is None:
                formed, chunks = _form(queue, now, cfg.max_running, cfg.batch_wait_s)
                ids = np.concatenate([c.ids for c in chunks])
                start = max(formed, rep.locked_until, now)
                running = _Batch(start, self._work(ids, first), chunks)
                running.left, first = running.work, False
                trainer_alone(start)
                now = start
            b = len(plan)
            x = running.left
            if y > 0:  # both compute: each at 1/f of its speed until the smaller share is done
                both = min(x, y)
                segments.append((now, now + f * both, b, True))
                now, x, y = now + f * both, x - both, y - both
                if y <= 1e-12:
                    y, trainer_end = 0.0, now
            if x > 0:
                segments.append((now, now + x, b, False))
                now += x
            running.end = now
            plan.append(running)
            running = None
        trainer_alone(math.inf)
        rep.plan, rep.segments = plan, segments
        if shared:
            self.trainer_end = trainer_end if self.trainer_left > 0 else math.inf
        for batch in plan:
            ids = np.concatenate([c.ids for c in batch.chunks])
            self.gen_done.flat[ids] = batch.end + cfg.return_s + self.tool_s.flat[ids]
            self.version.flat[ids] = self._version_at(batch.start)
            self._touched(ids)

    def _advance(self, r: int, t: float) -> None:
        """Move replica r's state to time t along its plan: finished batches are final, the running
        one keeps what is left of its work, the later ones go back to the queue. Plan again after."""
        rep, f = self.reps[r], self.slowdown
        if t <= rep.t:
            return
        done_work = [0.0] * len(rep.plan)
        trainer_done = 0.0
        for t0, t1, b, trainer_on in rep.segments:
            if t0 >= t:
                break
            span = min(t1, t) - t0
            if b >= 0:
                done_work[b] += span / f if trainer_on else span
            if trainer_on:
                trainer_done += span / f if b >= 0 else span
        rep.running, queue = None, []
        for b, batch in enumerate(rep.plan):
            if batch.end <= t:
                rep.started = True
                self._busy.append((np.array([r]), np.array([batch.start]), np.array([batch.end])))
            elif batch.start < t:
                batch.left = max(batch.work - done_work[b], 0.0)
                rep.running, rep.started = batch, True
            else:
                queue += batch.chunks
        rep.queue = queue  # every queued request was in a planned batch
        if self.shared and r == 0:
            self.trainer_left = max(0.0, self.trainer_left - trainer_done)
        rep.t = t

    def _version_at(self, t: float) -> int:
        ends = [end for end, _ in self._syncs]
        return self._syncs[bisect.bisect_right(ends, t) - 1][1]

    def _flush(self) -> None:
        for r in range(self.replicas):
            self._advance(r, math.inf)


def _form(queue: list[_Chunk], free: float, cap: int, wait: float) -> tuple[float, list[_Chunk]]:
    """(start, requests taken) of the next static batch, taken from the front of `queue` as the hf
    engine's `_next_batch` takes them: once a request waits, up to `cap` of them, waiting at most
    `wait` seconds for more while fewer than `cap` are there."""
    first = max(free, queue[0].arrival)
    deadline, formed, taken, count = first + wait, first, [], 0
    while queue and count < cap:
        chunk = queue[0]
        if chunk.arrival > deadline:
            break
        formed = max(formed, chunk.arrival)
        room = cap - count
        if len(chunk.ids) <= room:
            taken.append(queue.pop(0))
            count += len(chunk.ids)
        else:
            taken.append(_Chunk(chunk.arrival, chunk.ids[:room]))
            queue[0] = _Chunk(chunk.arrival, chunk.ids[room:])
            count = cap
    return (formed if count >= cap else deadline), taken
