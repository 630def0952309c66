"""Generation cost models: when each request of a launched batch finishes, and which policy made it.

    engine = ContinuousEngine(spec.rollout, gen_done, version)    # gen_done, version: [steps, N], filled in
    engine.arrive(t, k, prompt_len, resp_len)                # batch k's requests reach the engines at t
    end = engine.sync(t, seconds, version=k)                 # weight sync asked at t; returns when it is done
    engine.intervals()                                       # (replica, start, end) of every busy stretch

One decode iteration advances every sequence in it by one token and takes
`iteration_s + iteration_s_per_seq * sequences`; prefill costs `prefill_s_per_token` per prompt token.

- `static` (rlrm's hf engine, static.py): an engine takes up to `max_running` queued requests (waiting
  `batch_wait_s` for more), decodes them until the longest is done and returns them together;
  weight sync waits for the running batch (they share a lock). Rows leave as they finish (a
  batch costs `iteration_s` x its longest response + `iteration_s_per_seq` x all its tokens).
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

import numpy as np

_EMPTY = np.inf


class _Engine:
    shared = False  # the engine computes on the trainer's device (static.py)

    def __init__(self, rollout, gen_done: np.ndarray, version: np.ndarray, tool_s: np.ndarray | None = None):
        self.cfg = rollout
        # [steps, N] seconds a sample's tool calls add after its decoding (draws.tool_times); they hold no slot
        self.tool_s = np.zeros(gen_done.shape) if tool_s is None else tool_s
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


class ContinuousEngine(_Engine):
    """vLLM / SGLang: continuous batching, every engine processor sharing between its sequences."""

    def __init__(self, rollout, gen_done, version, tool_s=None):
        super().__init__(rollout, gen_done, version, tool_s)
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
        self.gen_done.flat[done] = self.finish[active] + self.cfg.return_s + self.tool_s.flat[done]
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
        if done.sum() == running.sum():  # every engine ran dry: start the next plan from empty arrays
            self.left, self.ids = self.left[:, :0], self.ids[:, :0]
            self.finish = self.finish[:, :0]

    def _flush(self) -> None:
        self._record(np.full(self.replicas, np.inf))
