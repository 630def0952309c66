"""Join the Ray a setting names, or start a new local one, unless this process already joined one; and leave it.

    join_ray(cfg.ray_address)   # one share of this process's Ray (always True: the caller holds a share)
    ...
    leave_ray()                 # the last share out stops Ray, if this process started it

Several parts of one run use one Ray (reward workers, placed server replicas, actor ranks), each starting and
closing on its own. The first to start it must not stop it under the others when it closes first (the others'
actors would be gone, and their next Ray call would start a new local Ray); so each part holds a share, and Ray
stops with the last share, and only when this process started it: a Ray the caller initialised (a test, a user's
script) stays up.

Which Ray: the address given, else `RAY_ADDRESS` (set by `ray job submit` for the job's driver), else a new local
Ray (`address="local"`), not Ray's own default, which joins whatever cluster was started last on this machine
(/tmp/ray/ray_current_cluster): another run's, or another test's, whose end took the workers with it. `auto`
still asks for that one.
"""

from __future__ import annotations

import os
import threading

_lock = threading.Lock()
_shares = 0  # join_ray calls not yet given back with leave_ray
_started = False  # whether this process's join_ray started the Ray those shares are of


def ray_address_to_join(address: str | None) -> str:
    """The address `ray.init` gets for `address`: itself, else RAY_ADDRESS, else a new local Ray."""
    return address or os.environ.get("RAY_ADDRESS") or "local"


def join_ray(address: str | None) -> bool:
    """Take a share of this process's Ray, `ray.init` at `address` first when none is initialised (see above).

    Returns True: the caller holds a share and gives it back once, with `leave_ray` (or `release_ray(...,
    shutdown=True)`, rlrm/launch/fleet/ray_release.py).
    """
    import ray

    global _shares, _started
    with _lock:
        if not ray.is_initialized():
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # no token file under the home folder
            ray.init(address=ray_address_to_join(address), include_dashboard=False, log_to_driver=False)
            _shares, _started = 0, True  # shares of a Ray stopped by someone else are void
        elif _shares == 0:
            _started = False  # initialised by the caller, not by a join_ray: theirs to stop
        _shares += 1
    return True


def leave_ray() -> None:
    """Give back one `join_ray` share; the last one stops Ray when this process's `join_ray` started it."""
    global _shares, _started
    with _lock:
        if _shares == 0:
            return  # nothing held: a second close of the same part
        _shares -= 1
        if _shares or not _started:
            return
        _started = False
        import ray

        if ray.is_initialized():
            ray.shutdown()
