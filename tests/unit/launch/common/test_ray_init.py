"""Shares of one Ray (rlrm/launch/common/ray_init.py) against a stand-in `ray` module: who starts it, which address,
and who stops it. The same with a real Ray and real parts: tests/integration/engine/test_ray_shared.py."""

from __future__ import annotations

import sys
import types

import pytest

from rlrm.launch.common import ray_init
from rlrm.launch.common.ray_init import join_ray, leave_ray
from rlrm.launch.fleet.ray_release import release_ray


class StandInRay(types.ModuleType):
    """`ray.init`, `is_initialized`, `shutdown` and `kill`, recorded."""

    def __init__(self, initialized: bool = False):
        super().__init__("ray")
        self.initialized, self.addresses, self.shutdowns, self.killed = initialized, [], 0, []

    def is_initialized(self) -> bool:
        return self.initialized

    def init(self, address: str, **_) -> None:
        self.initialized = True
        self.addresses.append(address)

    def shutdown(self) -> None:
        self.initialized = False
        self.shutdowns += 1

    def kill(self, actor) -> None:
        self.killed.append(actor)


@pytest.fixture
def ray(monkeypatch):
    fake = StandInRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(ray_init, "_shares", 0)
    monkeypatch.setattr(ray_init, "_started", False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return fake


def test_the_ray_a_part_started_stops_with_the_last_part_not_the_first(ray):
    assert join_ray(None) and join_ray("10.0.0.5:6379")  # reward workers start it; the rollout fleet joins
    assert ray.addresses == ["local"]  # one ray.init: the second part joins the Ray already there
    release_ray(["reward worker"], None, shutdown=True)  # the reward side closes first
    assert ray.initialized and ray.shutdowns == 0  # before the fix: shut down under the fleet's actors
    release_ray(["replica"], None, shutdown=True)
    assert ray.killed == ["reward worker", "replica"] and ray.shutdowns == 1 and not ray.initialized


def test_a_ray_the_caller_started_is_left_up(ray):
    ray.initialized = True  # a user's script or a test ran ray.init
    join_ray(None)
    leave_ray()
    leave_ray()  # a second close of the same part takes nothing
    assert ray.addresses == [] and ray.shutdowns == 0 and ray.initialized


def test_a_stopped_ray_is_not_asked_to_kill(ray):
    join_ray(None)
    ray.shutdown()  # stopped by someone else: ray.kill now would start a new local Ray
    release_ray(["replica"], None, shutdown=True)
    assert ray.killed == [] and not ray.initialized


def test_without_an_address_ray_address_is_joined(ray, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")  # as `ray job submit` sets it for the job's driver
    join_ray(None)
    leave_ray()
    join_ray("10.0.0.9:6379")  # a setting's own address comes first
    assert ray.addresses == ["10.0.0.5:6379", "10.0.0.9:6379"]  # before the fix: "local" first
