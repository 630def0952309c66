"""Generation cost models: when each request of a launched batch finishes, and which policy made it.

    engine = make_engine(spec.rollout, gen_done, version)    # gen_done, version: [steps, N], filled in
    engine.arrive(t, k, prompt_len, resp_len)                # batch k's requests reach the engines at t
    end = engine.sync(t, seconds, version=k)                 # weight sync asked at t; returns when it is done
    engine.intervals()                                       # (replica, start, end) of every busy stretch

One decode iteration advances every sequence in it by one token and takes
`iteration_s + iteration_s_per_seq * sequences`; prefill costs `prefill_s_per_token` per prompt token.

- `static` (rlrm's hf engine): an engine takes up to `max_running` queued requests (waiting
  `batch_wait_s` for more), decodes them until the longest is done and returns them together;
  weight sync waits for the running batch (they share a lock). Rows leave as they finish.
- `continuous` (vLLM, SGLang): sequences join and leave every iteration; every running sequence
  advances at the same rate, so an engine is processor sharing. Above `max_running` sequences
  the engine still runs `max_running` per iteration and shares them out evenly (a fluid stand-in
  for the FIFO admission queue; the same total work and the same last finish). A weight sync
  pauses every engine for its duration.

Times written to `gen_done` are provisional until no later event can change them: a later arrival
slows the requests still decoding (continuous) and a sync delays the batches not yet started.
`revisions[k]` counts the rewrites of batch k's times, so whoever caches a function of them
knows when to recompute.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

_EMPTY = np.inf


def make_engine(rollout, gen_done: np.ndarray, version: np.ndarray):
    """The engine model `rollout.batching` names, writing into gen_done/version [steps, N]."""
    cls = StaticEngine if rollout.batching == "static" else ContinuousEngine
    return cls(rollout, gen_done, version)


class _Engine:
    def __init__(self, rollout, gen_done: np.ndarray, version: np.ndarray):
        self.cfg = rollout
        self.gen_done, self.version = gen_done, version  # [steps, N]
        self.width = gen_done.shape[1]
        self.replicas = rollout.replicas
        self.revisions = np.zeros(gen_done.shape[0] + 1, dtype=np.int64)  # per batch k (index k)
        self._rr = 0  # round-robin offset: the next request goes to this replica
        self._busy: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (replica, start, end) arrays
        self._first_batch = True

    def _touched(self, ids: np.ndarray) -> None:
        """The times of the samples `ids` (flat) were rewritten: bump their batches' revisions."""
        if ids.size:
            self.revisions[ids.min() // self.width + 1 : ids.max() // self.width + 2] += 1

    def _assign(self, count: int) -> np.ndarray:
        """Replica of each of `count` new requests: round robin, as a least-loaded router spreads a burst."""
        replica = (self._rr + np.arange(count)) % self.replicas
        self._rr = (self._rr + count) % self.replicas
        return replica

    def intervals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(replica, start, end) of every stretch an engine was decoding (or prefilling)."""
        self._flush()
        if not self._busy:
            empty = np.zeros(0)
            return empty.astype(int), empty, empty
        parts = list(zip(*self._busy))
        return tuple(np.concatenate(p) for p in parts)  # type: ignore[return-value]

    def _flush(self) -> None:
        return None


@dataclass
class _Chunk:
    arrival: float
    ids: np.ndarray  # flat sample ids (row-major in [steps, N])


@dataclass
class _DecodeBatch:
    start: float
    end: float
    chunks: list[_Chunk]


@dataclass
class _StaticReplica:
    queue: list[_Chunk] = field(default_factory=list)  # not in a started batch yet, FIFO
    plan: list[_DecodeBatch] = field(default_factory=list)  # batches planned from the last event on
    free_at: float = 0.0  # end of the last started batch
    locked_until: float = 0.0  # end of the last weight sync
    started: bool = False  # a batch has started (the first one carries the warm-up)


class StaticEngine(_Engine):
    """rlrm's hf engine: batches of queued requests, each decoded to its longest and returned whole."""

    def __init__(self, rollout, gen_done, version):
        super().__init__(rollout, gen_done, version)
        self.reps = [_StaticReplica() for _ in range(self.replicas)]
        self._syncs: list[tuple[float, int]] = [(-np.inf, 0)]  # (end, version) of every weight sync
        self._prompt = np.zeros(gen_done.size)  # prompt tokens per sample (flat), for batch costs
        self._resp = np.zeros(gen_done.size)

    def arrive(self, t: float, k: int, prompt_len: np.ndarray, resp_len: np.ndarray) -> None:
        ids = (k - 1) * self.width + np.arange(len(resp_len))
        self._prompt[ids], self._resp[ids] = prompt_len, resp_len
        replica = self._assign(len(ids))
        for r, rep in enumerate(self.reps):
            mine = ids[replica == r]
            if mine.size:
                self._commit(r, t)
                rep.queue.append(_Chunk(t, mine))
                self._replan(rep)

    def sync(self, t: float, seconds: float, version: int) -> float:
        end = t
        for r, rep in enumerate(self.reps):
            self._commit(r, t)
            rep.locked_until = max(rep.free_at, t) + seconds  # the running batch holds the lock until its end
            end = max(end, rep.locked_until)
        self._syncs.append((end, version))
        for rep in self.reps:
            self._replan(rep)
        return end

    def _commit(self, r: int, t: float) -> None:
        """Batches that started before t are fixed; the later ones go back to the queue."""
        rep = self.reps[r]
        for b in rep.plan:
            if b.start < t:
                rep.free_at, rep.started = max(rep.free_at, b.end), True
                self._busy.append((np.array([r]), np.array([b.start]), np.array([b.end])))
        rep.queue = [c for b in rep.plan if b.start >= t for c in b.chunks] + rep.queue
        rep.plan = []

    def _replan(self, rep: _StaticReplica) -> None:
        cfg = self.cfg
        queue, free, first = list(rep.queue), rep.free_at, not rep.started
        while queue:
            formed, members = _form(queue, free, cfg.max_running, cfg.batch_wait_s)
            ids = np.concatenate([c.ids for c in members])
            start = max(formed, rep.locked_until)
            seconds = (cfg.batch_overhead_s + cfg.prefill_s_per_token * self._prompt[ids].sum()
                       + cfg.iteration_s * self._resp[ids].max() + cfg.iteration_s_per_seq * self._resp[ids].sum()
                       + (cfg.first_batch_extra_s if first else 0.0))  # fmt: skip
            rep.plan.append(_DecodeBatch(start, start + seconds, members))
            self.gen_done.flat[ids] = start + seconds + cfg.return_s
            self.version.flat[ids] = self._version_at(start)
            self._touched(ids)
            free, first = start + seconds, False
        rep.queue = []

    def _version_at(self, t: float) -> int:
        ends = [end for end, _ in self._syncs]
        return self._syncs[bisect.bisect_right(ends, t) - 1][1]

    def _flush(self) -> None:
        for r in range(self.replicas):
            self._commit(r, np.inf)


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


class ContinuousEngine(_Engine):
    """vLLM / SGLang: continuous batching, every engine processor sharing between its sequences."""

    def __init__(self, rollout, gen_done, version):
        super().__init__(rollout, gen_done, version)
        r = self.replicas
        self.left = np.full((r, 0), _EMPTY)  # [R, M] tokens still to decode, sorted per row, inf = empty
        self.ids = np.zeros((r, 0), dtype=np.int64)  # [R, M] flat sample id
        self.finish = np.zeros((r, 0))  # [R, M] planned finish of each sequence
        self.start = np.zeros(r)  # [R] when decoding (re)starts after prefill and sync pauses
        self.sync_end = np.zeros(r)  # [R] end of the last weight sync
        self.work_from = np.full(r, np.inf)  # [R] start of the busy stretch in progress (inf: idle)
        self.current_version = 0

    def arrive(self, t: float, k: int, prompt_len: np.ndarray, resp_len: np.ndarray) -> None:
        self._event(t)
        n, r = len(resp_len), self.replicas
        replica = self._assign(n)
        first = int(replica[0]) if n else 0
        per = -(-(first + n) // r)  # slots per engine; request i sits at flat position first + i of [per, R]
        left, ids = np.full(per * r, _EMPTY), np.full(per * r, -1, dtype=np.int64)
        left[first : first + n] = resp_len
        ids[first : first + n] = (k - 1) * self.width + np.arange(n)
        left, ids = left.reshape(per, r).T, ids.reshape(per, r).T
        counts = np.bincount(replica, minlength=r)
        prefill = np.bincount(replica, weights=prompt_len, minlength=r) * self.cfg.prefill_s_per_token
        if self._first_batch:
            prefill, self._first_batch = prefill + self.cfg.first_batch_extra_s, False
        got = counts > 0
        self.start = np.where(got, np.maximum(self.start, max(t, 0.0)) + prefill, self.start)
        self.work_from = np.where(got & ~np.isfinite(self.work_from), np.maximum(t, self.sync_end), self.work_from)
        self.left, self.ids = np.concatenate([self.left, left], 1), np.concatenate([self.ids, ids], 1)
        self.version.flat[ids[ids >= 0]] = self.current_version
        self._replan()

    def sync(self, t: float, seconds: float, version: int) -> float:
        self._event(t)
        working = np.isfinite(self.work_from)
        self._record(np.full(self.replicas, t))  # the engines stop decoding while weights load
        self.sync_end = np.full(self.replicas, t + seconds)
        self.start = np.maximum(self.start, t) + seconds
        self.work_from = np.where(working, t + seconds, np.inf)
        self.current_version = version
        self._replan()
        return t + seconds

    def _seconds_per_token(self, running: np.ndarray) -> np.ndarray:
        """Seconds for each of `running` sequences to advance one token (processor sharing)."""
        batch = np.minimum(running, self.cfg.max_running)
        per_iteration = self.cfg.iteration_s + self.cfg.iteration_s_per_seq * batch
        return per_iteration * running / np.maximum(batch, 1)

    def _replan(self) -> None:
        order = np.argsort(self.left, axis=1, kind="stable")
        self.left = np.take_along_axis(self.left, order, 1)
        self.ids = np.take_along_axis(self.ids, order, 1)
        active = np.isfinite(self.left)
        width = int(active.sum(1).max(initial=0))
        self.left, self.ids, active = self.left[:, :width], self.ids[:, :width], active[:, :width]
        running = active.sum(1)  # [R]
        # the j-th shortest finishes after the tokens between consecutive lengths, each decoded at
        # the rate of the sequences still running then (running - j of them)
        tokens = np.diff(np.where(active, self.left, 0.0), axis=1, prepend=0.0)  # [R, M]
        still = np.maximum(running[:, None] - np.arange(width)[None, :], 1)
        seconds = np.where(active, tokens * self._seconds_per_token(still), 0.0)
        self.finish = self.start[:, None] + np.cumsum(seconds, axis=1)
        done = self.ids[active]
        self.gen_done.flat[done] = self.finish[active] + self.cfg.return_s
        self._touched(done)

    def _last_finish(self) -> np.ndarray:
        running = np.isfinite(self.left).sum(1)
        if self.left.shape[1] == 0:
            return np.full(self.replicas, -np.inf)
        last = self.finish[np.arange(self.replicas), np.maximum(running - 1, 0)]
        return np.where(running > 0, last, -np.inf)

    def _record(self, until: np.ndarray) -> None:
        """Close the busy stretch in progress at `until` (or where the engine ran dry before it)."""
        end = np.minimum(self._last_finish(), until)
        keep = np.isfinite(self.work_from) & (end > self.work_from)
        if keep.any():
            self._busy.append((np.flatnonzero(keep), self.work_from[keep], end[keep]))
        self.work_from = np.where(self._last_finish() > until, until, np.inf)

    def _event(self, t: float) -> None:
        """Decode until t: record the busy stretches, shorten what is left of every sequence, drop finished ones."""
        if self.left.shape[1] == 0:
            return
        self._record(np.full(self.replicas, t))
        active = np.isfinite(self.left)
        running = active.sum(1)
        done = (self.finish <= t) & active
        j = done.sum(1)  # finished sequences per engine
        rows = np.arange(self.replicas)
        prev_left = np.where(j > 0, self.left[rows, np.maximum(j - 1, 0)], 0.0)
        prev_time = np.where(j > 0, self.finish[rows, np.maximum(j - 1, 0)], self.start)
        rate = 1.0 / self._seconds_per_token(np.maximum(running - j, 1))
        progress = np.where(t > self.start, prev_left + np.maximum(t - prev_time, 0.0) * rate, 0.0)
        left = self.left - progress[:, None]
        self.left = np.where(done, _EMPTY, np.where(active, np.maximum(left, 1e-9), _EMPTY))
        self.start = np.maximum(self.start, t)

    def _flush(self) -> None:
        self._record(np.full(self.replicas, np.inf))
