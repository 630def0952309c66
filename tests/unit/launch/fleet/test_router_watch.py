"""The fleet's watch over its SGLang router (rlrm/launch/fleet/server_fleet.py `_watch_router`), with a stand-in
router process: one death is one restart counted and said, however many tries bringing it back takes."""

from __future__ import annotations

import asyncio

from rlrm.config.servers import RolloutServerConfig
from rlrm.launch.fleet.server_fleet import ServerFleet


class DeadRouter:
    """A router process that died (exit code -9) and has not come back."""

    port, url = 30000, "http://127.0.0.1:30000"

    def __init__(self):
        self.kills = 0

    def alive(self) -> bool:
        return False

    def exit_code(self) -> int:
        return -9

    def why(self, lines: int = 3) -> str:
        return "killed"

    def kill(self) -> None:
        self.kills += 1


def test_a_router_that_will_not_come_back_is_one_restart_tried_again_less_and_less_often(capfd):
    fleet = ServerFleet(RolloutServerConfig(replicas=2).fleet_spec(), role="policy", model_path="m")
    fleet.router = DeadRouter()
    tries: list[float] = []

    def restart(router) -> None:
        tries.append(0.0)
        raise RuntimeError("port 30000 is taken")

    fleet._restart_router = restart

    async def watch_for(seconds: float) -> None:
        task = asyncio.get_running_loop().create_task(fleet._watch_router(interval_s=0.01))
        await asyncio.sleep(seconds)
        fleet._closing = True
        await asyncio.wait({task}, timeout=5)
        assert task.done()

    asyncio.run(watch_for(0.5))
    err = capfd.readouterr().err
    assert fleet.router_restarts == 1 and err.count("the SGLang router died") == 1
    # tried again 0.02, 0.04, 0.08, 0.16 s... later: a handful of tries in 0.5 s, not one every 10 ms
    assert 2 <= len(tries) <= 8 and err.count("did not come back") == len(tries)
    assert fleet.router_down()
