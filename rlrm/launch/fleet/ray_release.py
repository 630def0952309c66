"""Releasing what rlrm holds in Ray: its actors, their placement group, and Ray itself if rlrm started it.

release_ray(actors, group, shutdown=started_ray)   # actor ranks and placed server replicas alike
"""

from __future__ import annotations


def release_ray(actors: list, group, shutdown: bool) -> None:
    """Kill `actors` (a placed server's process dies with its actor), remove `group`, stop a Ray rlrm started."""
    import ray

    for actor in actors:
        ray.kill(actor)
    if group is not None:
        from ray.util.placement_group import remove_placement_group

        remove_placement_group(group)
    if shutdown:
        ray.shutdown()
