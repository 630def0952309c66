"""The open-files limit (`ulimit -n`) of a run: raised to what the system allows, and checked against what the
reward loop keeps open.

    raise_open_files_limit()                 # first thing in `rlrm train` and `rlrm bench`: soft := hard (<= 65536)
    open_files_needed(256, routed=True)      # 576: what the router may hold with 256 requests in flight

The limit is per process. Every reward request in flight is a socket in the trainer, and behind the SGLang router two
in the router (its side of the trainer's connection and its own to the replica), the process that holds the most;
libraries, logs and pipes add a few dozen. Clusters and containers often set a soft limit of 1,024 or 256 under a much
higher hard limit; Ray, vLLM and SGLang raise the soft limit to the hard one (at most 65,536) when they start, and so
does rlrm, for itself and, by inheritance, every process it launches. Measured: under a limit of 256 a tiny-genrm step
(256 requests in flight at most) had 60 of 64 samples defaulted, with only the router's "503: No available workers" to
say why; the router held 289 descriptors, the trainer 156 and the judge 153.
"""

from __future__ import annotations

BASE = 64  # descriptors a process holds besides its reward requests
RAISED_AT_MOST = 65536  # Ray's cap (vLLM's and SGLang's 65535): a container's hard limit of 2^30 is no target


def raise_open_files_limit() -> int | None:
    """Raise this process's soft open-files limit to its hard one (children inherit it); the limit now, or None where
    there is none to read (not Unix)."""
    try:
        import resource
    except ImportError:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = RAISED_AT_MOST if hard == resource.RLIM_INFINITY else min(hard, RAISED_AT_MOST)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # a platform that refuses (macOS caps at OPEN_MAX): keep what there is
            pass
    return None if soft == resource.RLIM_INFINITY else soft


def open_files_limit() -> int | None:
    """This process's soft open-files limit; None when there is none (or none to read)."""
    try:
        import resource
    except ImportError:
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def open_files_needed(in_flight: int, routed: bool) -> int:
    """Descriptors the busiest process of a run with `in_flight` reward requests may hold at once: the SGLang router
    holds two sockets for each (`routed`), else the process sending them one."""
    return BASE + (2 if routed else 1) * in_flight
