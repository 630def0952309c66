"""Sleep mode for a colocated reward server: its weights leave the accelerator between scorings.

    POST /sleep?level=1   weights to host memory, accelerator cache emptied; model requests get 503
    POST /wake_up         weights back on the device
    GET  /is_sleeping     {"is_sleeping": bool}

The names and shapes are vLLM's (which serves them with `--enable-sleep-mode`). The model is
moved under the backend's compute lock, so it never changes device in the middle of a batch, and
only once the model requests admitted before the sleep have been answered (one waiting in the
engine's batch window would run on weights moved off its device). On
a CPU-only server there is no accelerator memory to free: sleep only gates requests, and says
so in its answer (`"moved_bytes": 0`).
"""

from __future__ import annotations

import asyncio
import sys

from rlrm.launch.server.protocol import RequestError

SLEEP_GATED = ("/v1/completions", "/v1/chat/completions", "/generate", "/classify")
DRAIN_S = 60.0  # longest a sleep waits for the requests admitted before it (the trainer's /sleep waits this more)


class SleepState:
    """Which device the weights should be on, and whether requests are turned away."""

    def __init__(self, model, lock, device: str, release=None):
        self.model, self.lock, self.device = model, lock, str(device)
        self.release = release  # frees what is bound to the weights' memory (compiled decoding's caches and graphs)
        self.sleeping = False
        self.in_flight = 0  # model requests admitted and not yet answered (counted by the server's gate)
        self._drained: asyncio.Event | None = None  # set when in_flight reaches 0 while a sleep waits for it

    def started(self) -> None:
        self.in_flight += 1

    def finished(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0 and self._drained is not None:
            self._drained.set()

    def check(self, path: str) -> None:
        if self.sleeping and path in SLEEP_GATED:
            raise RequestError(
                "the model is asleep (colocated placement): POST /wake_up first",
                status=503,
                headers={"Retry-After": "1"},
            )

    def _move(self, device: str) -> int:
        import torch

        with self.lock:
            # from where the weights are now: a wake while awake (or one that ended a drained sleep's wait) and a
            # second sleep move nothing, and keep compiled decoding's graphs
            moved = 0
            if self.device != "cpu" and not on(next(self.model.parameters()).device, torch.device(device)):
                moved = sum(p.numel() * p.element_size() for p in self.model.parameters())
            if moved:
                if self.release is not None:
                    self.release()
                self.model.to(device)
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
            return moved

    async def sleep(self) -> dict:
        self.sleeping = True  # new requests are turned away at once; those admitted before are answered first
        if self.in_flight:
            if self._drained is None or self._drained.is_set():  # one for every sleep asked meanwhile
                self._drained = asyncio.Event()
            try:
                await asyncio.wait_for(self._drained.wait(), DRAIN_S)
            except asyncio.TimeoutError:  # (3.10's is not the builtin) a request that never ends: say, go on
                print(
                    f"rlrm server: {self.in_flight} requests still running after {DRAIN_S:g} s: sleeping anyway",
                    file=sys.stderr,
                    flush=True,
                )
        if not self.sleeping:  # woken while it waited: the weights stay where they are
            return {"is_sleeping": False, "moved_bytes": 0}
        moved = await asyncio.to_thread(self._move, "cpu")
        return {"is_sleeping": True, "moved_bytes": moved}

    async def wake_up(self) -> dict:
        moved = await asyncio.to_thread(self._move, self.device)
        self.sleeping = False
        return {"is_sleeping": False, "moved_bytes": moved}


def on(here, target) -> bool:
    """Whether weights on device `here` are on `target`: "cuda" (the server's --device auto) is the weights'
    cuda:0, so a device without an index matches any of its type (one server, one device)."""
    return here.type == target.type and (target.index is None or here.index == target.index)


def add_sleep_routes(app, state: SleepState) -> None:
    @app.post("/sleep")
    async def sleep(level: int = 1):
        if level not in (1, 2):
            raise RequestError(f"level must be 1 or 2, got {level}")
        return await state.sleep()

    @app.post("/wake_up")
    async def wake_up():
        return await state.wake_up()

    @app.get("/is_sleeping")
    async def is_sleeping():
        return {"is_sleeping": state.sleeping}
