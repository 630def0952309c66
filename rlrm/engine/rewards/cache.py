"""The content-addressed reward cache: the same judgement is paid for once.

    cache = RewardCache.open(cfg.cache, contract.fingerprint)     # None when reward.cache is off for this kind
    outcome = await cache.through(sample, loop._attempts)          # the reward loop's scoring, behind the cache
    cache.take_metrics()        # reward/cache_hits, reward/cache_misses, reward/cache_saved_calls, ...
    cache.take_metrics(tags)    # only those counted under these SCORED_FOR tags (rlrm/engine/rewards/tags.py)

Key: sha256 of (contract fingerprint, data source, prompt, response, reference, extra info), so two runs whose
rewards differ in anything that decides a score never read each other's entries, even in one file. An agent
trajectory's turns enter without the policy versions that wrote them: which weights wrote a turn is not what it
says. Kept: the checked score and its extra info without the call ledger (a hit made no call); numpy's and
torch's scalars as the Python numbers they hold. Never kept: a failure, whatever the failure policy then gave,
nor a result whose extra info JSON cannot hold (scored, not cached: counted in reward/cache_errors). A hit's
extra info says `reward_cached: true` (samples.jsonl shows it). An entry read from the file is checked as a
fresh score is (a finite float32 score, numbers for its cost, components and turn scores); one that is not is a
miss, counted in reward/cache_errors.

Samples that share a key while the first is still being scored (a GRPO group repeating a response) wait for it
and are hits when it succeeds; when it fails each is scored on its own, under its own retries.

In memory (least recently used first out past max_entries) and, with reward.cache.path, in a SQLite file
(rlrm/engine/rewards/cache_store.py). When that file cannot be written the run goes on with the memory cache:
one warning, and reward/cache_errors counts each failed read or write. A file this user can read but not write
(a team's shared verdicts) serves its entries and keeps new ones in memory: one warning, counted once.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Awaitable, Callable, Hashable, Iterable

from rlrm.call_errors import CallError
from rlrm.config.reward_cache import RewardCacheConfig
from rlrm.engine.rewards.base import RewardResult, RewardSample
from rlrm.engine.rewards.cache_store import CacheUnavailable, SqliteStore
from rlrm.engine.rewards.components import COMPONENTS_KEY
from rlrm.engine.rewards.tags import PerTag
from rlrm.engine.rewards.turn_scores import TURN_SCORES_KEY
from rlrm.float32 import fits_float32

CACHED_KEY = "reward_cached"
# what one scoring cost, not what it found: a hit repeats none of it
_COST_KEYS = ("model_calls", "judge_prompt_tokens", "judge_completion_tokens")
_CALL_KEYS = (*_COST_KEYS, "rate_limited", "throttle_wait_s", "model_not_found", "model_requests", "injected_latency_s")

Outcome = RewardResult | CallError


def cache_key(fingerprint: str, sample: RewardSample) -> str:
    """sha256 hex of the contract and everything of the sample a reward function reads (not its uid or index)."""
    extra_info = _without_turn_versions(sample.extra_info)
    what = [fingerprint, sample.data_source, sample.prompt, sample.solution_str, sample.ground_truth, extra_info]
    try:
        text = json.dumps(what, sort_keys=True, default=_exact)
    except (TypeError, ValueError):  # keys JSON cannot sort or hold (1 beside "a", a tuple): each key as its repr
        text = "repr-keys:" + json.dumps(_repr_keys(what), sort_keys=True, default=_exact)
    return hashlib.sha256(text.encode()).hexdigest()


def _exact(value):
    """A value JSON cannot hold, whole. Parquet's lists come back as numpy arrays, whose str() elides long ones
    ("[0 1 2 ... 997 998 999]") and rounds floats: two different test-case lists would share a key."""
    if hasattr(value, "tolist"):  # numpy arrays and scalars, torch tensors
        return {"type": type(value).__name__, "dtype": str(getattr(value, "dtype", "")), "values": value.tolist()}
    return str(value)


def _without_turn_versions(extra_info):
    """An agent trajectory's turns (extra_info["turns"]) without each turn's `policy_versions`."""
    if not isinstance(extra_info, dict) or not isinstance(extra_info.get("turns"), list):
        return extra_info
    turns = [
        {k: v for k, v in turn.items() if k != "policy_versions"} if isinstance(turn, dict) else turn
        for turn in extra_info["turns"]
    ]
    return {**extra_info, "turns": turns}


def _repr_keys(value):
    if isinstance(value, dict):
        return {repr(k): _repr_keys(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_repr_keys(v) for v in value]
    return value


class RewardCache:
    def __init__(self, fingerprint: str, max_entries: int, store: SqliteStore | None = None):
        self.fingerprint, self.max_entries, self.store = fingerprint, max_entries, store
        self._memory: OrderedDict[str, dict] = OrderedDict()
        self._in_flight: dict[str, asyncio.Future] = {}
        self._warned = False
        self._read_only_warned = False
        self._counts_by_tag = PerTag(_zero)  # per SCORED_FOR tag, as the reward loop's counters

    @property
    def _counts(self) -> dict[str, float]:
        return self._counts_by_tag.now

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
            cache._note_read_only()
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

    def take_metrics(self, tags: Iterable[Hashable] | None = None) -> dict[str, float]:
        """Counts since the last call (then reset); with `tags`, those counted under them and untagged only."""
        metrics = _zero()
        for counts in self._counts_by_tag.take(tags):
            for name, count in counts.items():
                metrics[name] += count
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
        self._note_read_only()
        if value is None:
            return None
        if not _well_formed(value):  # a file another version or process wrote: never served unchecked
            self._counts["reward/cache_errors"] += 1
            return None
        self._remember(key, value)
        return value

    def _put(self, key: str, result: RewardResult) -> None:
        extra = {k: v for k, v in result.extra.items() if k not in _CALL_KEYS and k != CACHED_KEY}
        try:
            kept = _jsonable(extra)
        except (TypeError, ValueError):  # keys JSON cannot hold (a tuple), a cycle: scored, not cached
            self._counts["reward/cache_errors"] += 1
            return
        value = {"score": result.score, "extra": kept, "cost": {k: result.extra.get(k, 0) for k in _COST_KEYS}}
        self._remember(key, value)
        if self.store is not None:
            try:
                self.store.put(key, self.fingerprint, value)
            except CacheUnavailable as exc:
                self._disk_failed(exc)
            self._note_read_only()

    def _remember(self, key: str, value: dict) -> None:
        self._memory[key] = value
        self._memory.move_to_end(key)
        while len(self._memory) > self.max_entries:
            self._memory.popitem(last=False)

    def _note_read_only(self) -> None:
        """A file this user can read but not write: its entries are served, new ones kept in memory; warned and
        counted in reward/cache_errors once, when found (at open, or at the first write SQLite refuses)."""
        if self.store is None or self.store.read_only is None or self._read_only_warned:
            return
        self._read_only_warned = True
        self._counts["reward/cache_errors"] += 1
        print(
            f"warning: reward cache {self.store.path} is read-only ({self.store.read_only}): its entries are served, "
            "new ones are kept in memory only",
            file=sys.stderr,
        )

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


def _well_formed(value) -> bool:
    """An entry as `_put` writes it, with the checks the loop gives a fresh score (loop.py `_check`)."""
    if not isinstance(value, dict) or not _number(value.get("score")) or not isinstance(value.get("extra"), dict):
        return False
    cost = value.get("cost", {})
    if not isinstance(cost, dict) or not all(_number(v) for v in cost.values()):
        return False
    components = value["extra"].get(COMPONENTS_KEY) or {}
    turns = value["extra"].get(TURN_SCORES_KEY) or []
    return (
        isinstance(components, dict)
        and all(_number(v) for v in components.values())
        and isinstance(turns, list)
        and all(_number(v) for v in turns)
    )


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and fits_float32(value)


def _jsonable(extra: dict) -> dict:
    """The extra info as JSON gives it back, so a hit from memory and a hit from the file look the same; numpy's
    and torch's scalars as the numbers they hold (a reported np.bool_ stays a bool, not the text "True")."""
    return json.loads(json.dumps(extra, default=_plain))


def _plain(value):
    if getattr(value, "shape", None) == () and callable(getattr(value, "item", None)):
        return value.item()
    return str(value)
