"""One glibc malloc arena for a training process, whose freed memory is kept for the next step.

    from rlrm.allocator import use_one_malloc_arena
    use_one_malloc_arena()      # first thing in `rlrm train` and `rlrm bench`, before any thread exists

glibc gives each new thread an arena of its own, made of 64 MiB heaps that it unmaps as soon as
they empty. torch's CPU tensors are malloc'd, so the overlapping modes, which train in a trainer
thread, mapped and faulted in their activations again at every step: the same update ran about
20% slower there than on the main thread, and `stream` was slower than `sync`. With one arena
every thread allocates like the main thread. Measured with `rlrm bench reward-latency --steps 20`
in one session: one-step-off 1.98x vs 1.75x and fully-async 2.47x vs 2.30x over sync.

Every step frees its activations and allocates them again. glibc returns the top of the heap to
the kernel once more than M_TRIM_THRESHOLD of it is free (by default twice the largest block it
has mmapped lately, a few MiB), so each step faulted its activations in again: 14k-72k page
faults and 0.06-0.16 s of system time per tiny-rule step (of ~0.7 s CPU), varying from step to
step. Blocks up to 32 MiB now come from the heap (M_MMAP_THRESHOLD, glibc's highest) and up to
1 GiB of free heap is kept (M_TRIM_THRESHOLD): ~160 faults and ~0.04 s per step, the CPU time
of a step ~8% lower (`benchmarks/step_vs_trl.py`). The peak memory is unchanged: a step reaches
it anyway; it is just not given back between steps.

Not applied to the embedded server, where it made no measurable difference (256 concurrent
/classify clients: 970 and 901 samples/s with one arena, 925 and 903 without).
MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or glibc.malloc tunables set by the
user win; other C libraries (musl, macOS) are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

# from glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc refuses more (HEAP_MAX_SIZE / 2 on 64-bit)
TRIM_THRESHOLD_BYTES = 1 << 30


def use_one_malloc_arena() -> bool:
    """Cap glibc's arenas at one unless MALLOC_ARENA_MAX says otherwise, and keep freed memory
    (see the module docstring) unless the user tuned malloc; True if the arena cap was applied."""
    libc = _glibc()
    if libc is None:
        return False
    tuned = "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ
    if not tuned and "glibc.malloc" not in os.environ.get("GLIBC_TUNABLES", ""):
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)  # first: it also stops the dynamic thresholds
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    return "MALLOC_ARENA_MAX" not in os.environ and bool(libc.mallopt(M_ARENA_MAX, 1))


def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # glibc only: musl has no arenas to cap
        return libc
    except (OSError, AttributeError):
        return None
