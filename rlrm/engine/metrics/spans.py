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
        self._open: dict[int, tuple[str, float]] = {}  # spans begun and not ended: token -> (lane, start)
        self._tokens = 0

    def open(self, lane: str, start_s: float) -> int:
        """A span of `lane` begun at `start_s` whose end is not known yet (a reward call in flight): the idle meter
        counts it busy up to the end of any window it is still open at. Give the token back to `close`."""
        self._tokens += 1
        self._open[self._tokens] = (lane, start_s)
        return self._tokens

    def close(self, token: int) -> None:
        """The span `token` ended (its whole Span is appended as usual)."""
        self._open.pop(token, None)

    def still_open(self) -> list[tuple[str, float]]:
        """(lane, start) of the spans begun and not ended."""
        return list(self._open.values())

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
