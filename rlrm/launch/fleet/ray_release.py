"""Releasing what rlrm holds in Ray: its actors, their placement group, and its share of Ray itself.

release_ray(actors, group, shutdown=joined_ray)   # actor ranks, placed server replicas and reward workers alike
"""

from __future__ import annotations

from rlrm.launch.common.ray_init import leave_ray


def release_ray(actors: list, group, shutdown: bool) -> None:
    """Kill `actors` (a placed server's process dies with its actor) and remove `group`; with `shutdown` (the caller
    holds a `join_ray` share), give the share back: Ray stops when it was the last and this process started Ray."""
    import ray

    try:
        if ray.is_initialized():  # a Ray stopped meanwhile took them with it; a call now would start a new one
            for actor in actors:
                ray.kill(actor)
            if group is not None:
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(group)
    finally:
        if shutdown:
            leave_ray()
