"""A colocated reward service's wake and sleep over its replicas (rlrm/engine/reward_service.py `_post_all`), with
a stand-in balancer and pool: a dead replica (the supervisor restarts it) is said and routed around; a live one that
refused stays a stop (asleep, it would answer every score 503; awake, it would hold the GPU while the policy
trains); the run's own cancellation goes through."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from rlrm.call_errors import TransientError
from rlrm.engine.reward_service import RewardService


class Balancer:
    def __init__(self, refusing: str, delay_s: float = 0.0):
        self.refusing, self.delay_s, self.asked = refusing, delay_s, []

    async def post(self, path, body, timeout_s, url=None):
        self.asked.append((url, path))
        await asyncio.sleep(self.delay_s)
        if url == self.refusing:
            raise TransientError(f"{url}{path}: refused")
        return {}


def _service(dead: set[str], refusing: str = "http://r2", delay_s: float = 0.0) -> RewardService:
    service = RewardService.__new__(RewardService)  # its replicas only: no servers are started
    service.cfg = SimpleNamespace(placement="colocated", server=SimpleNamespace(start_timeout_s=5))
    service.pool = SimpleNamespace(urls=["http://r1", "http://r2"], alive=lambda url: url not in dead)
    service.balancer = Balancer(refusing, delay_s)
    return service


def test_a_dead_replica_is_said_and_left_to_the_balancer(capfd):
    service = _service(dead={"http://r2"})
    asyncio.run(service.wake())
    assert {url for url, _ in service.balancer.asked} == {"http://r1", "http://r2"}
    assert "reward replica http://r2 did not answer /wake_up" in capfd.readouterr().err


def test_a_live_replica_that_refused_or_no_replica_answering_stops_the_step():
    with pytest.raises(TransientError, match="r2/wake_up: refused"):
        asyncio.run(_service(dead=set()).wake())
    with pytest.raises(TransientError, match="r2/sleep"):
        asyncio.run(_service(dead=set()).sleep())


def test_the_runs_own_cancellation_goes_through():
    async def main():
        task = asyncio.get_running_loop().create_task(_service(dead={"http://r2"}, delay_s=10).wake())
        await asyncio.sleep(0.05)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())
