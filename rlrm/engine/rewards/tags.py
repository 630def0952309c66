"""Reward counters kept apart by what each sample was scored for, so that a mode that scores ahead of the
trainer (one-step-off, fully-async) reports each step's own samples, not the ones that happened to finish
while it waited.

    SCORED_FOR.set(group.order)            # in a sample's own task: every count it makes goes under that tag
    stats = PerTag(RewardStats)
    stats.now.samples += 1                 # the counters of the current task's tag (None: untagged)
    stats.take([3, 4])                     # tags 3 and 4, and the untagged counters (then forgotten)
    stats.take()                           # every tag's counters: what a mode that never tags (sync) sees

asyncio copies the context into each task it creates, so a tag set inside a sample's task stays with that
sample and never leaks into the caller or into other samples.
"""

from __future__ import annotations

import contextvars
from typing import Callable, Generic, Hashable, Iterable, TypeVar

T = TypeVar("T")

SCORED_FOR: contextvars.ContextVar[Hashable | None] = contextvars.ContextVar("rlrm_reward_scored_for", default=None)


class PerTag(Generic[T]):
    """One set of counters (`new()`) per tag, made on first use."""

    def __init__(self, new: Callable[[], T]):
        self._new = new
        self._by_tag: dict[Hashable | None, T] = {}

    @property
    def now(self) -> T:
        """The counters of the tag the current task scores for."""
        tag = SCORED_FOR.get()
        counters = self._by_tag.get(tag)
        if counters is None:
            counters = self._by_tag[tag] = self._new()
        return counters

    def peek(self, tags: Iterable[Hashable] | None = None) -> list[T]:
        """The counters of `tags` and the untagged ones (None: every tag's), left in place."""
        if tags is None:
            return list(self._by_tag.values())
        return [self._by_tag[t] for t in {None, *tags} if t in self._by_tag]

    def take(self, tags: Iterable[Hashable] | None = None) -> list[T]:
        """As `peek`, and forgotten: the next counts under those tags start from zero. Untagged counters (a cache
        file that failed to open, outside any sample) go to the first caller that takes any."""
        if tags is None:
            taken, self._by_tag = list(self._by_tag.values()), {}
            return taken
        return [self._by_tag.pop(t) for t in {None, *tags} if t in self._by_tag]
