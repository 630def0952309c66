"""Join the Ray a setting names, or start a new local one, unless this process already joined one.

    if join_ray(cfg.ray_address):   # True: this call started (or joined) Ray; the caller shuts it down after
        self._started_ray = True

No address means a new local Ray (`address="local"`), not Ray's own default, which joins whatever cluster was
started last on this machine (/tmp/ray/ray_current_cluster): another run's, or another test's, whose end took
the workers with it. `auto` still asks for that one.
"""

from __future__ import annotations

import os


def join_ray(address: str | None) -> bool:
    """`ray.init` at `address` (None: a new local Ray) unless Ray is initialised; True when this call did it."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # no token file under the home folder
    ray.init(address=address or "local", include_dashboard=False, log_to_driver=False)
    return True
