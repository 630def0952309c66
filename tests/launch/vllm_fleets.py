"""Fleets of real servers for module-scoped fixtures: started once (a vLLM takes 35-80 s), supervised on an
event loop of their own, closed at the end of the module.

    with LoopFleets() as fleets:
        judge = fleets.start(RewardServerConfig(backend="vllm", model="tiny:judge", router="client"), "genrm")
        judge.urls[0]
"""

from __future__ import annotations

import asyncio
import threading


class LoopFleets:
    """Runs ServerFleets on a background event loop (their supervisors need one that keeps running)."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.fleets = []

    def run(self, coro, timeout_s: float = 900):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def start(self, cfg, role: str, **kwargs):
        from rlrm.engine.models.tiny import resolve_model_path
        from rlrm.launch.fleet.server_fleet import ServerFleet

        fleet = ServerFleet(cfg, role=role, model_path=resolve_model_path(cfg.model), **kwargs)
        self.run(fleet.start())
        self.fleets.append(fleet)
        return fleet

    def __enter__(self) -> "LoopFleets":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        for fleet in self.fleets:
            self.run(fleet.close(), 120)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
