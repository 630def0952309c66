"""What a Ray address may look like, checked when a profile loads instead of inside `ray.init`.

check_ray_address("10.0.0.5:6379")        # -> "10.0.0.5:6379"; "auto", "local", "ray://host:10001" pass too
check_ray_address("10.0.0.5")             # ValueError naming the form expected
check_one_ray("10.0.0.5:6379", "10.0.0.9:6379")   # ValueError: one process joins one Ray
"""

from __future__ import annotations

import re

_HOST_PORT = re.compile(r"^(ray://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$")


def check_ray_address(value: str | None) -> str | None:
    """`value` when it is None, auto, local or [ray://]host:port with a port in 1-65535 (ValueError otherwise)."""
    if value is None or value in ("auto", "local"):
        return value
    match = _HOST_PORT.match(value.strip())
    if not match or not 0 < int(match.group(3)) < 65536:
        raise ValueError(
            f"{value!r} is not a Ray address: give host:port of the head node (e.g. 10.0.0.5:6379), "
            "ray://host:10001 for Ray Client, auto (the cluster this machine joined) or local"
        )
    return value.strip()


def check_one_ray(actor_address: str | None, reward_address: str | None) -> None:
    """Refuse actor.ray_address and reward.ray_address naming two clusters: the trainer process joins one Ray, and
    whichever part starts first would pick it, the other's address dropped without a word."""
    if actor_address and reward_address and actor_address != reward_address:
        raise ValueError(
            f"actor.ray_address={actor_address} and reward.ray_address={reward_address} name two Ray clusters, "
            "but one run joins one Ray; set both to the same address"
        )
