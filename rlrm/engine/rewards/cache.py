"""The content-addressed reward cache: the same judgement is paid for once.

    cache = RewardCache.open(cfg.cache, contract.fingerprint)     # None when reward.cache is off for this kind
    outcome = await cache.through(sample, loop._attempts)          # the reward loop's scoring, behind the cache
    cache.take_metrics()        # reward/cache_hits, reward/cache_misses, reward/cache_saved_calls, ...

Key: sha256 of (contract fingerprint, data source, prompt, response, reference, extra info), so two runs whose
rewards differ in anything that decides a score never read each other's entries, even in one file. Kept: the
checked score and its extra info without the call ledger (a hit made no call). Never kept: a failure, whatever
the failure policy then gave. A hit's extra info says `reward_cached: true` (samples.jsonl shows it).

Samples that share a key while the first is still being scored (a GRPO group repeating a response) wait for it
and are hits when it succeeds; when it fails each is scored on its own, under its own retries.

In memory (least recently used first out past max_entries) and, with reward.cache.path, in a SQLite file
(rlrm/engine/rewards/cache_store.py). When that file cannot be written the run goes on with the memory cache:
one warning, and reward/cache_errors counts each failed read or write.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Awaitable, Callable

from rlrm.call_errors import CallError
from rlrm.config.reward_cache import RewardCacheConfig
from rlrm.engine.rewards.base import RewardResult, RewardSample
from rlrm.engine.rewards.cache_store import CacheUnavailable, SqliteStore

CACHED_KEY = "reward_cached"
# what one scoring cost, not what it found: a hit repeats none of it
_COST_KEYS = ("model_calls", "judge_prompt_tokens", "judge_completion_tokens")
_CALL_KEYS = (*_COST_KEYS, "rate_limited", "throttle_wait_s", "model_not_found", "model_requests", "injected_latency_s")

Outcome = RewardResult | CallError


def cache_key(fingerprint: str, sample: RewardSample) -> str:
    """sha256 hex of the contract and everything of the sample a reward function reads (not its uid or index)."""
    what = [fingerprint, sample.data_source, sample.prompt, sample.solution_str, sample.ground_truth, sample.extra_info]
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


class RewardCache:
    def __init__(self, fingerprint: str, max_entries: int, store: SqliteStore | None = None):
        self.fingerprint, self.max_entries, self.store = fingerprint, max_entries, store
        self._memory: OrderedDict[str, dict] = OrderedDict()
        self._in_flight: dict[str, asyncio.Future] = {}
        self._warned = False
        self._counts = _zero()

    @classmethod
    def open(cls, cfg: RewardCacheConfig, kind: str, fingerprint: str, sampled: bool = False) -> "RewardCache | None":
        """The cache reward.cache asks for a reward of `kind`, or None when it is off.

        Raises CacheFileError for a file at reward.cache.path that is not an rlrm reward cache."""
        if not cfg.active(kind, sampled):
            return None
        cache = cls(fingerprint, cfg.max_entries)
        if cfg.path is not None:
            try:
                cache.store = SqliteStore.open(Path(cfg.path), cfg.max_entries)
            except CacheUnavailable as exc:
                cache._disk_failed(exc)
        return cache

    async def through(self, sample: RewardSample, score: Callable[[RewardSample], Awaitable[Outcome]]) -> Outcome:
        """The sample's outcome: a kept score, else `score(sample)` (kept when it is a score, never a failure)."""
        key = cache_key(self.fingerprint, sample)
        kept = self._get(key)
        if kept is None and key in self._in_flight:
            outcome = await asyncio.shield(self._in_flight[key])
            kept = self._get(key) if isinstance(outcome, RewardResult) else None
        if kept is not None:
            self._counts["reward/cache_hits"] += 1
            for name in _COST_KEYS:
                self._counts[f"reward/cache_saved_{name.removeprefix('judge_')}"] += kept.get("cost", {}).get(name, 0)
            return RewardResult(kept["score"], {**copy.deepcopy(kept["extra"]), CACHED_KEY: True})
        self._counts["reward/cache_misses"] += 1
        done = asyncio.get_running_loop().create_future()
        self._in_flight.setdefault(key, done)
        try:
            outcome = await score(sample)
            if isinstance(outcome, RewardResult):
                self._put(key, outcome)
                outcome.extra[CACHED_KEY] = False
            return outcome
        except BaseException as exc:
            outcome = CallError(f"not scored: {type(exc).__name__}")  # waiters score on their own
            raise
        finally:
            if self._in_flight.get(key) is done:
                del self._in_flight[key]
                done.set_result(outcome)

    def take_metrics(self) -> dict[str, float]:
        """Counts since the last call (then reset)."""
        metrics, self._counts = self._counts, _zero()
        looked = metrics["reward/cache_hits"] + metrics["reward/cache_misses"]
        metrics["reward/cache_hit_rate"] = metrics["reward/cache_hits"] / looked if looked else 0.0
        return metrics

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def _get(self, key: str) -> dict | None:
        if key in self._memory:
            self._memory.move_to_end(key)
            return self._memory[key]
        if self.store is None:
            return None
        try:
            value = self.store.get(key)
        except CacheUnavailable as exc:
            self._disk_failed(exc)
            return None
        if value is None or not _well_formed(value):
            return None
        self._remember(key, value)
        return value

    def _put(self, key: str, result: RewardResult) -> None:
        extra = {k: v for k, v in result.extra.items() if k not in _CALL_KEYS and k != CACHED_KEY}
        value = {
            "score": result.score,
            "extra": _jsonable(extra),
            "cost": {k: result.extra.get(k, 0) for k in _COST_KEYS},
        }
        self._remember(key, value)
        if self.store is not None:
            try:
                self.store.put(key, self.fingerprint, value)
            except CacheUnavailable as exc:
                self._disk_failed(exc)

    def _remember(self, key: str, value: dict) -> None:
        self._memory[key] = value
        self._memory.move_to_end(key)
        while len(self._memory) > self.max_entries:
            self._memory.popitem(last=False)

    def _disk_failed(self, exc: CacheUnavailable) -> None:
        """Go on with the memory cache alone: warned once, counted each time."""
        self._counts["reward/cache_errors"] += 1
        if not self._warned:
            self._warned = True
            print(f"warning: reward cache file not used: {exc}; scores are cached in memory only", file=sys.stderr)
        if self.store is not None:
            try:
                self.store.conn.close()
            except Exception:
                pass  # already unusable
            self.store = None


def _zero() -> dict[str, float]:
    names = ("hits", "misses", "errors", "saved_model_calls", "saved_prompt_tokens", "saved_completion_tokens")
    return {f"reward/cache_{name}": 0 for name in names}


def _well_formed(value: dict) -> bool:
    score = value.get("score")
    return isinstance(score, (int, float)) and not isinstance(score, bool) and isinstance(value.get("extra"), dict)


def _jsonable(extra: dict) -> dict:
    """The extra info as JSON gives it back, so a hit from memory and a hit from the file look the same."""
    return json.loads(json.dumps(extra, default=str))
