"""A custom reward's worker pool when the system refuses a new worker process (a pids limit, `ulimit -n` reached): every
caller that waits for a worker hears it; none waits for ever, its attempt deadline held. Fake workers: no process."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from rlrm.engine.rewards import worker_pool
from rlrm.engine.rewards.worker_pool import FunctionPool


class _FakeWorker:  # a worker process that never answers (no spawn in a unit test)
    def __init__(self, *args):
        self.proc = SimpleNamespace(exitcode=None)
        self.conn = SimpleNamespace(send=lambda message: None)

    async def receive(self):
        await asyncio.sleep(3600)

    def kill(self):
        pass


def test_every_waiter_hears_that_no_worker_can_start(monkeypatch):
    monkeypatch.setattr(worker_pool, "_Worker", _FakeWorker)
    pool = FunctionPool("unused.py", "slow", processes=1)

    async def main():
        first = asyncio.ensure_future(pool.call((), {}))
        await asyncio.sleep(0.05)
        queued = [asyncio.ensure_future(pool.call((), {})) for _ in range(2)]
        await asyncio.sleep(0.05)

        def refused(*args):
            raise OSError(11, "Resource temporarily unavailable")

        monkeypatch.setattr(worker_pool, "_Worker", refused)
        first.cancel()  # the reward loop's attempt deadline
        with pytest.raises(asyncio.CancelledError):
            await first
        with pytest.raises(RuntimeError, match="cannot start a worker process"):
            await asyncio.wait_for(queued[0], 2)
        with pytest.raises(
            RuntimeError, match="cannot start a worker process"
        ):  # it waited for ever: no worker left to hand back
            await asyncio.wait_for(queued[1], 2)

    try:
        asyncio.run(main())
    finally:
        pool.close()
