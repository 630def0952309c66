"""Dynamic batching for a server: concurrent requests become one batched forward pass.

    batcher = DynamicBatcher(run_batch=forward, max_batch=64, max_queue=1024)
    scores = await batcher.submit([ids_a, ids_b])   # items of one request stay together

The forward runs in one worker thread so the event loop keeps accepting requests (and answering
health checks) while a batch computes. A full queue raises `Overloaded` at once: the server turns
it into 503 with Retry-After instead of letting latency grow without bound.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable


class Overloaded(Exception):
    """The queue is full; the caller should retry later."""


@dataclass
class _Job:
    items: list
    future: asyncio.Future


class DynamicBatcher:
    def __init__(self, run_batch: Callable[[list], list], max_batch: int = 64, max_queue: int = 1024, wait_ms: float = 2.0):
        self.run_batch, self.max_batch, self.max_queue = run_batch, max_batch, max_queue
        self.wait_s = wait_ms / 1000.0
        self.batches_run = 0
        self.queued_items = 0
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batcher")

    async def submit(self, items: list) -> list[Any]:
        """Results for `items`, in order, computed in some batch with other requests' items."""
        if self.queued_items + len(items) > self.max_queue:
            raise Overloaded(f"{self.queued_items} items queued (limit {self.max_queue})")
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done():
            self._queue = asyncio.Queue()
            self._worker = loop.create_task(self._serve())
        job = _Job(list(items), loop.create_future())
        self.queued_items += len(job.items)
        self._queue.put_nowait(job)
        return await job.future

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = [await self._queue.get()]
            size = len(jobs[0].items)
            deadline = loop.time() + self.wait_s
            while size < self.max_batch:
                try:
                    job = self._queue.get_nowait()
                except asyncio.QueueEmpty:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    try:
                        job = await asyncio.wait_for(self._queue.get(), remaining)
                    except asyncio.TimeoutError:
                        break
                jobs.append(job)
                size += len(job.items)
            flat = [item for job in jobs for item in job.items]
            self.queued_items -= len(flat)
            try:
                results = await loop.run_in_executor(self._executor, self.run_batch, flat)
                self.batches_run += 1
            except Exception as exc:  # every waiting request gets the error, none hangs
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(exc)
                continue
            start = 0
            for job in jobs:
                if not job.future.done():
                    job.future.set_result(results[start : start + len(job.items)])
                start += len(job.items)

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        self._executor.shutdown(wait=False)
