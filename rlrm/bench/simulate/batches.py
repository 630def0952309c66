"""A launched batch (one step's prompts) and when its samples are generated and scored.

    batch = Batch(k, launched_s, draws, gen_done[k - 1], version[k - 1], n)
    rewards = RewardQueue(spec.reward, samples_per_batch, batches_in_flight)
    batch.times(rewards, engine.revisions[k])["group_scored"]   # [P] when each group's last reward arrived

A sample's reward call starts when it is generated (when the whole batch is, in sync mode, which
scores after generating everything) and takes its drawn time (draws.py). The reward loop lets
`max_concurrency` calls per worker run at once (sample i goes to worker i mod workers); more
wait in line, first come first served. A hosted judge's `reward.limits` are the run's one budget, as
rlrm/engine/rewards/limits.py enforces it: `max_concurrent` calls at once over every worker, and calls
paced, not burst (call k+1 leaves `60/rpm` s after call k, and `tokens_per_call * 60/tpm` s for the
token budget), in launch order.
"""

from __future__ import annotations

import heapq

import numpy as np


def group_rows(groups: np.ndarray, n: int) -> np.ndarray:
    """The rows of these groups' samples in their batch ([len(groups) * n]; sample j of group g is row g * n + j)."""
    return (groups[:, None] * n + np.arange(n)).ravel()


class Batch:
    """Step k's prompts: n samples per prompt, prompt-major, as the rollouter launches them."""

    def __init__(
        self,
        k: int,
        launched_s: float,
        draws,
        gen_done: np.ndarray,
        version: np.ndarray,
        n: int,
        score_after_all: bool = False,
    ):
        self.k, self.launched_s, self.n = k, launched_s, n
        self.prompt_len = np.repeat(draws.prompt_len[k - 1], n)  # [N]
        self.resp_len = draws.resp_len[k - 1]  # [N]
        self.reward_s = draws.reward_s[k - 1]  # [N]
        self.failed = draws.failed[k - 1]  # [N]
        self.attempts = draws.attempts[k - 1]  # [N]
        self.cached = draws.cached[k - 1]  # [N] answered by the reward cache: no call
        self.gen_done, self.version = gen_done, version  # [N] views, written by the engine
        self.prompts = len(self.resp_len) // n
        self.taken = np.zeros(self.prompts, dtype=bool)  # fully-async: groups already trained
        self.score_after_all = score_after_all
        self.group_tokens = (self.prompt_len + self.resp_len).reshape(self.prompts, n).sum(1)  # [P]
        self.group_failed = self.failed.reshape(self.prompts, n).any(1)  # [P] a sample failed for good
        self._cache: dict[str, np.ndarray] = {}
        self._cache_key: tuple | None = None

    def times(self, rewards: "RewardQueue", revision) -> dict[str, np.ndarray]:
        """reward_start, reward_done [N]; group_generated, group_scored, scored_so_far (groups 0..g
        all scored) [P]; recomputed when the engine or the reward queue has moved times since."""
        key = (revision, rewards.revision)
        if key != self._cache_key:
            arrival = np.full_like(self.gen_done, self.gen_done.max()) if self.score_after_all else self.gen_done
            start, done = rewards.schedule(self, arrival)
            shape = (self.prompts, self.n)
            self._cache = {
                "reward_start": start,
                "reward_done": done,
                "group_generated": self.gen_done.reshape(shape).max(1),
                "group_scored": done.reshape(shape).max(1),
            }
            self._cache["scored_so_far"] = np.maximum.accumulate(self._cache["group_scored"])
            self._cache_key = (revision, rewards.revision)
        return self._cache


class RewardQueue:
    """The reward loop's concurrency: `workers` x `max_concurrency` calls at once, FIFO beyond.

    A call starts the moment its sample arrives unless its worker's slots are all taken then:
    the loop is checked for that (calls of earlier batches still running included) and only
    when it would overflow are the calls queued one by one. Batches are queued in launch order
    (a later batch's samples never overtake an earlier one's).
    """

    def __init__(self, reward, samples_per_batch: int, batches_in_flight: int):
        self.workers, self.slots = reward.workers, reward.max_concurrency
        limits = reward.limits
        if limits.max_concurrent is not None and limits.max_concurrent < self.workers * self.slots:
            self.workers, self.slots = 1, limits.max_concurrent  # one cap over every worker
        self.pace_s = limits.pace_s()  # seconds between two calls' departures (0: not paced)
        per_worker = -(-samples_per_batch // self.workers)
        # the slots can never all be taken, and nothing paces the calls
        self.unlimited = self.slots >= per_worker * batches_in_flight and self.pace_s == 0
        self.revision = 0
        self._calls: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # batch k -> (arrival, start, done)

    def schedule(self, batch: Batch, arrival: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, done) [N] of the batch's reward calls for these arrival times. A sample the reward
        cache answers is done on arrival and takes no slot (its calls are not queued or paced)."""
        if not batch.cached.any():
            return self._schedule(batch.k, arrival, batch.reward_s)
        start, done, miss = arrival.copy(), arrival.copy(), ~batch.cached
        if miss.any():
            start[miss], done[miss] = self._schedule(batch.k, arrival[miss], batch.reward_s[miss])
        return start, done

    def _schedule(self, k: int, arrival: np.ndarray, seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.unlimited:
            return arrival, arrival + seconds
        if k in self._calls and not np.array_equal(self._calls[k][0], arrival):
            self.revision += 1  # this batch moved: the later ones are queued again when asked
        worker = np.arange(len(arrival)) % self.workers
        earliest = float(arrival.min())
        running = [(s, d) for j, (_, s, d) in self._calls.items() if j < k and d.max() > earliest]  # earlier calls
        before_s = np.concatenate([s for s, _ in running]) if running else np.zeros(0)
        before_d = np.concatenate([d for _, d in running]) if running else np.zeros(0)
        before_w = (
            np.concatenate([np.arange(len(s)) % self.workers for s, _ in running]) if running else np.zeros(0, int)
        )
        live = before_d > earliest
        before_s, before_d, before_w = before_s[live], before_d[live], before_w[live]
        done = arrival + seconds
        if (
            _most_at_once(
                np.concatenate([before_s, arrival]),
                np.concatenate([before_d, done]),
                np.concatenate([before_w, worker]),
            )
            <= self.slots
        ):
            start = arrival
        else:
            start = self._queue(arrival, seconds, worker, before_d, before_w)
        if self.pace_s > 0:
            start = self._paced(k, start)
        done = start + seconds
        self._calls[k] = (arrival.copy(), start, done)
        for j in [j for j in self._calls if j < k - 8]:  # long finished
            del self._calls[j]
        return start, done

    def _paced(self, k: int, start: np.ndarray) -> np.ndarray:
        """Each call at its own slot of one schedule: `pace_s` after the previous call, earlier batches first."""
        earlier = [s for j, (_, s, _) in self._calls.items() if j < k and s.size]
        slot = max((float(s.max()) + self.pace_s for s in earlier), default=-np.inf)
        paced = np.empty_like(start)
        for i in np.argsort(start, kind="stable").tolist():
            slot = max(float(start[i]), slot)
            paced[i] = slot
            slot += self.pace_s
        return paced

    def _queue(self, arrival, seconds, worker, busy_until, busy_worker) -> np.ndarray:
        heaps = []
        for w in range(self.workers):
            taken = sorted(busy_until[busy_worker == w].tolist())[-self.slots :]
            heaps.append([0.0] * (self.slots - len(taken)) + taken)
            heapq.heapify(heaps[-1])
        start = np.empty_like(arrival)
        order = np.argsort(arrival, kind="stable")
        for i, a, s in zip(order.tolist(), arrival[order].tolist(), seconds[order].tolist()):
            heap = heaps[i % self.workers]
            begin = max(a, heap[0])
            heapq.heapreplace(heap, begin + s)
            start[i] = begin
        return start


def _most_at_once(start: np.ndarray, end: np.ndarray, worker: np.ndarray) -> int:
    """The most intervals [start, end) of one worker open at the same time."""
    if start.size == 0:
        return 0
    span = float(max(end.max(), start.max()) - min(start.min(), 0.0)) + 1.0
    shift = worker * span  # each worker's intervals in a time range of their own
    starts, ends = np.sort(start + shift), np.sort(end + shift)
    # open at the i-th start: the i + 1 started so far less those ended by then (an end at the same time first)
    return int((np.arange(1, starts.size + 1) - np.searchsorted(ends, starts, side="right")).max())
