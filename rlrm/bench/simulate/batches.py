"""A launched batch (one step's prompts) and when its samples are generated and scored.

    batch = Batch(k, launched_s, draws, gen_done[k - 1], version[k - 1], n)
    rewards = RewardQueue(spec.reward, samples_per_batch, batches_in_flight)
    batch.group_scored(rewards, engine.revision)    # [P] when each group's last reward arrived

A sample's reward call starts when it is generated (when the whole batch is, in sync mode, which
scores after generating everything) and takes its drawn time (draws.py). The reward loop lets
`max_concurrency` calls per worker run at once (sample i goes to worker i mod workers); more
wait in line, first come first served.
"""

from __future__ import annotations

import heapq

import numpy as np


class Batch:
    """Step k's prompts: n samples per prompt, prompt-major, as the rollouter launches them."""

    def __init__(self, k: int, launched_s: float, draws, gen_done: np.ndarray, version: np.ndarray, n: int,
                 score_after_all: bool = False):  # fmt: skip
        self.k, self.launched_s, self.n = k, launched_s, n
        self.prompt_len = np.repeat(draws.prompt_len[k - 1], n)  # [N]
        self.resp_len = draws.resp_len[k - 1]  # [N]
        self.reward_s = draws.reward_s[k - 1]  # [N]
        self.failed = draws.failed[k - 1]  # [N]
        self.attempts = draws.attempts[k - 1]  # [N]
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

    When that many slots can never fill (the benchmark sizes the loop so), a call starts the
    moment its sample arrives. Otherwise calls queue per worker; batches are queued in launch
    order (a later batch's samples never overtake an earlier one's).
    """

    def __init__(self, reward, samples_per_batch: int, batches_in_flight: int):
        self.workers, self.slots = reward.workers, reward.max_concurrency
        per_worker = -(-samples_per_batch // self.workers)
        self.unlimited = self.slots >= per_worker * batches_in_flight
        self.revision = 0
        self._after: dict[int, list[list[float]]] = {}  # batch k -> slot heaps once its calls are queued
        self._arrivals: dict[int, np.ndarray] = {}

    def schedule(self, batch: Batch, arrival: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, done) [N] of the batch's reward calls for these arrival times."""
        if self.unlimited:
            return arrival, arrival + batch.reward_s
        return self._queued(batch, arrival)

    def _queued(self, batch: Batch, arrival: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = batch.k
        if k in self._arrivals and not np.array_equal(self._arrivals[k], arrival):
            for later in [j for j in self._after if j >= k]:  # this batch moved: later ones must be queued again
                del self._after[later]
            self.revision += 1
        before = max((j for j in self._after if j < k), default=None)
        heaps = [list(h) for h in self._after[before]] if before is not None else [[0.0] * self.slots for _ in range(self.workers)]
        start = np.empty_like(arrival)
        order = np.argsort(arrival, kind="stable")
        for i, a, s in zip(order.tolist(), arrival[order].tolist(), batch.reward_s[order].tolist()):
            heap = heaps[i % self.workers]
            begin = max(a, heap[0])
            heapq.heapreplace(heap, begin + s)
            start[i] = begin
        self._after[k], self._arrivals[k] = heaps, arrival.copy()
        return start, start + batch.reward_s
