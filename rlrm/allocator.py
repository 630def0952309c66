"""One glibc malloc arena for the whole process.

    from rlrm.allocator import use_one_malloc_arena
    use_one_malloc_arena()      # first thing in `rlrm`, before any thread exists

glibc gives each new thread its own malloc arena. torch's CPU tensors are malloc'd, so a step
trained in the scheduler's trainer thread allocates from a thread arena, whose heaps glibc
shrinks and regrows far more eagerly than the main one: on the tiny policy the same update ran
about 20% slower there than on the main thread, which made `stream` (training in that thread)
slower than `sync` (training on the main thread). With a single arena every thread allocates
like the main thread; measured with `rlrm bench reward-latency`, every mode got faster.

MALLOC_ARENA_MAX set by the user wins; other C libraries (musl, macOS) are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_ARENA_MAX = -8  # from glibc's malloc.h


def use_one_malloc_arena() -> bool:
    """Cap glibc's arenas at one unless MALLOC_ARENA_MAX says otherwise; True if applied."""
    if not sys.platform.startswith("linux") or "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # glibc only: musl has no arenas to cap
        return bool(libc.mallopt(M_ARENA_MAX, 1))
    except (OSError, AttributeError):
        return False
