"""Every span of a run (trace.json, idle ratios), owned by the trainer and handed to whoever records.

    spans = SpanLog()
    mark = spans.cursor()
    spans.append(Span("reward", "reward", start, end))   # the rollouter, the trainer, ...
    fresh = spans.since(mark)                             # what was recorded after `mark`
    spans.compact(mark, drop_lanes={"generate"})          # keep long runs bounded

Spans are appended on the event loop only (the trainer thread records into its step's StepTimer),
so no lock is needed.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from rlrm.engine.metrics.timing import Span


class SpanLog:
    def __init__(self) -> None:
        self._spans: list[Span] = []

    def append(self, span: Span) -> None:
        self._spans.append(span)

    def extend(self, spans: Iterable[Span]) -> None:
        self._spans.extend(spans)

    def cursor(self) -> int:
        """A mark for `since` and `compact`: the number of spans recorded so far."""
        return len(self._spans)

    def since(self, cursor: int) -> list[Span]:
        """The spans recorded after `cursor`."""
        return self._spans[cursor:]

    def compact(self, cursor: int, drop_lanes: set[str]) -> None:
        """Forget the spans of `drop_lanes` recorded after `cursor` (cursors past it are invalid after)."""
        self._spans[cursor:] = [sp for sp in self._spans[cursor:] if sp.lane not in drop_lanes]

    def __iter__(self) -> Iterator[Span]:
        return iter(self._spans)

    def __len__(self) -> int:
        return len(self._spans)
