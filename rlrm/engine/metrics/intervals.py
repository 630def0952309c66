"""Busy intervals -> idle ratios: 1 - |union of busy intervals| / wall time.

Pure functions. A component's idle ratio over a window is measured from every interval it was
busy in, merged, so overlapping work is never counted twice.
"""

from __future__ import annotations


def merged(
    intervals: list[tuple[float, float]], window: tuple[float, float] | None = None
) -> list[tuple[float, float]]:
    """`intervals` (clipped to `window` if given) as the fewest disjoint intervals covering the same time, in order:
    a rollout server's requests, one interval each and overlapping, as the spans of its busy time."""
    clipped = []
    for start, end in intervals:
        if window is not None:
            start, end = max(start, window[0]), min(end, window[1])
        if end > start:
            clipped.append((start, end))
    clipped.sort()
    out: list[tuple[float, float]] = []
    for start, end in clipped:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def union_length(intervals: list[tuple[float, float]], window: tuple[float, float] | None = None) -> float:
    """Total length covered by `intervals`, clipped to `window` if given."""
    return sum(end - start for start, end in merged(intervals, window))


def idle_ratio(intervals: list[tuple[float, float]], window: tuple[float, float]) -> float:
    """Fraction of `window` in which no interval was busy (0.0 when the window is empty)."""
    wall = window[1] - window[0]
    if wall <= 0:
        return 0.0
    return max(0.0, 1.0 - union_length(intervals, window) / wall)
