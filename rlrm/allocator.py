"""One glibc malloc arena for a training process.

    from rlrm.allocator import use_one_malloc_arena
    use_one_malloc_arena()      # first thing in `rlrm train` and `rlrm bench`, before any thread exists

glibc gives each new thread an arena of its own, made of 64 MiB heaps that it unmaps as soon as
they empty. torch's CPU tensors are malloc'd, so the overlapping modes, which train in a trainer
thread, mapped and faulted in their activations again at every step: the same update ran about
20% slower there than on the main thread, and `stream` was slower than `sync`. With one arena
every thread allocates like the main thread. Measured with `rlrm bench reward-latency --steps 20`
in one session: one-step-off 1.98x vs 1.75x and fully-async 2.47x vs 2.30x over sync.

Not applied to the embedded server, where it made no measurable difference (256 concurrent
/classify clients: 970 and 901 samples/s with one arena, 925 and 903 without).
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
