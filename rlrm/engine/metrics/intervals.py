"""Busy intervals -> idle ratios: 1 - |union of busy intervals| / wall time.

Pure functions. A component's idle ratio over a window is measured from every interval it was
busy in, merged, so overlapping work is never counted twice.
"""

from __future__ import annotations


def union_length(intervals: list[tuple[float, float]], window: tuple[float, float] | None = None) -> float:
    """Total length covered by `intervals`, clipped to `window` if given."""
    clipped = []
    for start, end in intervals:
        if window is not None:
            start, end = max(start, window[0]), min(end, window[1])
        if end > start:
            clipped.append((start, end))
    clipped.sort()
    total, cur_start = 0.0, 0.0
    cur_end: float | None = None  # None: no interval open yet (cur_start is read only with one)
    for start, end in clipped:
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def idle_ratio(intervals: list[tuple[float, float]], window: tuple[float, float]) -> float:
    """Fraction of `window` in which no interval was busy (0.0 when the window is empty)."""
    wall = window[1] - window[0]
    if wall <= 0:
        return 0.0
    return max(0.0, 1.0 - union_length(intervals, window) / wall)
