"""Dynamic batching for a server: concurrent requests become one batched forward pass.

    batcher = DynamicBatcher(run_batch=forward, max_batch=64, max_queue=1024)
    scores = await batcher.submit([ids_a, ids_b])   # items of one request stay together

The forward runs in one worker thread so the event loop keeps accepting requests (and answering
health checks) while a batch computes. A full queue raises `Overloaded` at once: the server turns
it into 503 with Retry-After instead of letting latency grow without bound.

A batched forward that raises is run again request by request, so one bad request cannot fail its
batch-mates: each request gets its own result or its own `ForwardFailed`, which says whether the
request's input is to blame (`input_error`: the server answers 422, not worth retrying) or the
server (500).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable


class Overloaded(Exception):
    """The queue is full; the caller should retry later."""


class ForwardFailed(Exception):
    """The forward failed for this request even when run alone.

    `input_error` is True when the input is to blame: batch-mates succeeded alone, or the error is
    one an input causes (an index out of range, a bad value). Otherwise it is a server fault.
    """

    def __init__(self, cause: Exception, input_error: bool):
        detail = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        super().__init__(f"{type(cause).__name__}: {detail}" if detail else type(cause).__name__)
        self.cause, self.input_error = cause, input_error


# errors an input provokes by itself (torch raises IndexError for an embedding id out of range)
_INPUT_ERRORS = (IndexError, ValueError, TypeError, OverflowError)


@dataclass
class _Job:
    items: list
    future: asyncio.Future


class DynamicBatcher:
    def __init__(
        self, run_batch: Callable[[list], list], max_batch: int = 64, max_queue: int = 1024, wait_ms: float = 2.0
    ):
        self.run_batch, self.max_batch, self.max_queue = run_batch, max_batch, max_queue
        self.wait_s = wait_ms / 1000.0
        self.batches_run = 0
        self.split_batches = 0  # batches whose forward raised and were run again request by request
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
        if self._queue is None:  # made with the worker above
            raise RuntimeError("the batcher's queue is missing while its worker runs")
        self._queue.put_nowait(job)
        return await job.future

    async def _serve(self) -> None:
        if self._queue is None:  # made before this worker is started
            raise RuntimeError("the batcher's worker started without a queue")
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
            except Exception as exc:
                if len(jobs) == 1:
                    _settle(jobs[0], ForwardFailed(exc, isinstance(exc, _INPUT_ERRORS)))
                else:
                    await self._one_by_one(jobs)
                continue
            start = 0
            for job in jobs:
                _settle(job, results[start : start + len(job.items)])
                start += len(job.items)

    async def _one_by_one(self, jobs: list[_Job]) -> None:
        """Run each request of a failed batch alone; only the requests that still fail get an error."""
        loop = asyncio.get_running_loop()
        self.split_batches += 1
        outcomes: list = []
        for job in jobs:
            try:
                outcomes.append(await loop.run_in_executor(self._executor, self.run_batch, job.items))
                self.batches_run += 1
            except Exception as exc:  # every waiting request gets an answer, none hangs
                outcomes.append(exc)
        others_ok = any(not isinstance(o, Exception) for o in outcomes)
        for job, outcome in zip(jobs, outcomes):
            if isinstance(outcome, Exception):
                outcome = ForwardFailed(outcome, others_ok or isinstance(outcome, _INPUT_ERRORS))
            _settle(job, outcome)

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        self._executor.shutdown(wait=False)


def _settle(job: _Job, outcome) -> None:
    if job.future.done():  # the caller went away
        return
    if isinstance(outcome, Exception):
        job.future.set_exception(outcome)
    else:
        job.future.set_result(outcome)
