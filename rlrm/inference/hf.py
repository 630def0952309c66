"""The embedded rollout engine: a transformers causal LM behind the async per-request interface.

    engine = HFRolloutEngine(model, eos_token_ids=[2], pad_token_id=0)
    done = await engine.generate_many(prompts, [SamplingParams(seed=i) for i in range(len(prompts))])
    await engine.close()

Requests wait in a queue; a background task takes up to `max_batch_size` of them (waiting at
most `batch_wait_ms` for more after the first), left-pads them and runs one KV-cached decode loop
in a dedicated worker thread, so the event loop stays free for rewards and new requests. (One
long-lived thread rather than `asyncio.to_thread`: torch gives every thread that runs ops its own
OpenMP team, so a stable thread keeps one warm team.) Requests with the same prompt (a GRPO
group) are prefilled once and their KV cache copied per row. Rows that finish leave the batch
once at most half of it is still decoding, so a few long responses do not pay for the finished ones
(`rlrm.inference.decode`). With `compile` set, batches decode instead with a static KV cache and a
compiled step, CUDA graphs on a GPU (`rlrm.inference.static_decode`).

Sampling is inverse-CDF with one uniform per row and token drawn from that request's own seeded
generator, so a request draws the same tokens whatever else shares its batch
(`rlrm.inference.sampling`). New weights are loaded in place under a lock the decode loop holds for a
whole batch: never inside one.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from rlrm.errors import OutOfDeviceMemory, out_of_memory_named
from rlrm.inference.base import Completion, EngineClosedError, RequestFailedAlone, SamplingParams
from rlrm.inference.decode import decode
from rlrm.inference.tf32 import precision


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    seed: int
    future: asyncio.Future


class HFRolloutEngine:
    """Dynamic-batching generation with a transformers causal LM (CPU or GPU).

    Args:
        model: any transformers causal LM; the engine owns it (pass a copy if you train another).
        eos_token_ids: token ids that end a response (kept in it); may be empty.
        pad_token_id: id fed for padding; its embeddings are masked out.
        max_batch_size: most requests decoded together.
        batch_wait_ms: how long to wait for more requests once the first is queued.
        batch_gap_ms: when set, the batch also closes once no request arrived for this long (a server,
            whose requests trickle in over HTTP, waits up to `batch_wait_ms` only while they keep coming).
        seed: seeds the seeds given to requests that bring none (default: `torch.initial_seed()`,
            so a run seeded with `torch.manual_seed` repeats itself).
        compile: "off" (the dynamic loop), or a `rlrm.inference.static_decode` backend: "cudagraphs" (CUDA
            only), "inductor", "eager". The same tokens either way, up to float rounding.
    """

    def __init__(
        self,
        model,
        eos_token_ids: list[int],
        pad_token_id: int,
        max_batch_size: int = 64,
        batch_wait_ms: float = 2.0,
        seed: int | None = None,
        batch_gap_ms: float | None = None,
        compile: str = "off",
    ):
        import torch

        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.model = model.eval()
        self.eos_token_ids = [int(t) for t in eos_token_ids]
        self.pad_token_id = int(pad_token_id)
        self.max_batch_size = max_batch_size
        self.batch_wait_s = max(0.0, batch_wait_ms) / 1000.0
        self.batch_gap_s = None if batch_gap_ms is None else max(0.0, batch_gap_ms) / 1000.0
        self.version = 0  # weight version stamped on completions
        self.batches_run = 0  # decode loops run so far (how well requests were batched)
        self.split_batches = 0  # batches that failed and were run again a request at a time
        self.busy_intervals: list[tuple[float, float]] = []  # (start, end) perf_counter of each decode batch
        self._max_len = getattr(model.config, "max_position_embeddings", None)
        self._vocab = model.get_input_embeddings().num_embeddings
        self._keep_last_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._static = None
        if compile != "off":
            from rlrm.inference.static_decode import StaticDecoder

            self._static = StaticDecoder(self.model, compile, max_batch_size)
        self._seeds = random.Random(torch.initial_seed() if seed is None else seed)
        self._lock = threading.Lock()  # held by a decode loop for a whole batch, and by update_weights
        self._executor: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worker: asyncio.Task | None = None
        self._pending: collections.deque[_Request] = collections.deque()
        self._arrived: asyncio.Event | None = None
        self._stop: threading.Event | None = None

    @property
    def dtype(self):
        """The model's parameter dtype (a torch.dtype), or "tf32" for float32 on CUDA with TF32 products
        (rlrm.inference.tf32.precision): with the actor's, its log-probs match the actor's."""
        weight = next(self.model.parameters())
        return precision(weight.dtype, weight.device)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """Generate one response.

        Raises:
            ValueError: at once, for an empty prompt, an unknown token id, or a prompt that with
                `max_new_tokens` does not fit the model's positions.
            EngineClosedError: the engine was closed before the request finished.
        """
        request = self._request(prompt_ids, sampling)
        arrived = self._start()
        self._pending.append(request)
        arrived.set()
        return await request.future

    async def generate_many(
        self, prompts: list[list[int]], samplings: list[SamplingParams] | SamplingParams
    ) -> list[Completion]:
        """Generate several requests concurrently; results keep the input order.

        Every request is checked before any is queued, so a bad one fails the call at once.
        """
        if isinstance(samplings, SamplingParams):
            samplings = [samplings] * len(prompts)
        if len(samplings) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(samplings)} sampling params")
        requests = [self._request(p, s) for p, s in zip(prompts, samplings)]
        arrived = self._start()
        self._pending.extend(requests)
        arrived.set()
        return list(await asyncio.gather(*(r.future for r in requests)))

    def update_weights(self, state_dict: dict, version: int) -> None:
        """Load new policy weights; later batches use them and stamp `version` on their completions.

        Blocks while a batch is being decoded (the weights never change inside one); the caller
        may change its tensors as soon as this returns.
        """
        with self._lock:
            _check_fits(self.model.state_dict(), state_dict)  # all or nothing: a strict load copies what fits first
            self.model.load_state_dict(state_dict)
            self.version = version

    def release_compiled(self) -> None:
        """Free what compiled decoding holds (`compile` set: static caches; with "cudagraphs" its CUDA graphs, while
        torch.compile keeps its own under "inductor"); the next batch makes them again. Call it holding the engine's lock (`_lock`), as a server's sleep does around a weight move."""
        if self._static is not None:
            self._static.release()

    async def start(self) -> None:
        """Nothing to start: the decode task starts with the first request."""

    def take_metrics(self) -> dict:
        """No counters of its own (the rollout/* counters are the servers')."""
        return {}

    def take_busy_intervals(self) -> list[tuple[float, float]]:
        """The (start, end) `time.perf_counter()` of every decode batch since the last call."""
        taken, self.busy_intervals = self.busy_intervals, []
        return taken

    async def close(self) -> None:
        """Stop the background task; requests still queued or decoding fail with EngineClosedError."""
        worker, self._worker = self._worker, None
        if self._stop is not None:
            self._stop.set()  # the decode loop checks it every token
        if worker is not None and worker.get_loop() is asyncio.get_running_loop():
            worker.cancel()
            await asyncio.wait([worker])
            if not worker.cancelled():
                worker.exception()  # a crash already failed every caller; do not warn again
        if self._executor is not None:
            executor, self._executor = self._executor, None
            await asyncio.wrap_future(executor.submit(lambda: None))  # the aborted batch has left the thread
            if executor is not _COMPILED_DECODING:
                executor.shutdown(wait=False)

    def _request(self, prompt_ids, sampling: SamplingParams) -> _Request:
        prompt_ids = [int(t) for t in prompt_ids]
        if not prompt_ids:
            raise ValueError("empty prompt: a request needs at least one prompt token")
        if min(prompt_ids) < 0 or max(prompt_ids) >= self._vocab:
            raise ValueError(f"prompt holds a token id outside the model's vocabulary [0, {self._vocab})")
        if self._max_len and len(prompt_ids) + sampling.max_new_tokens > self._max_len:
            raise ValueError(
                f"prompt of {len(prompt_ids)} tokens + {sampling.max_new_tokens} new tokens exceeds the model's "
                f"{self._max_len} positions; shorten the prompt or lower max_new_tokens"
            )
        stop_ids = list(sampling.stop_token_ids or ())
        if stop_ids and (min(stop_ids) < 0 or max(stop_ids) >= self._vocab):
            raise ValueError(f"stop_token_ids holds a token id outside the model's vocabulary [0, {self._vocab})")
        # any integer seeds a generator: torch takes 64 bits (a seed near 2**64 plus a choice's index wraps)
        seed = sampling.seed % 2**64 if sampling.seed is not None else self._seeds.getrandbits(63)
        return _Request(prompt_ids, sampling, seed, asyncio.get_running_loop().create_future())

    def _start(self) -> asyncio.Event:
        """Start the batching task on the running loop (again after close, or on a new loop); its wake-up event."""
        loop = asyncio.get_running_loop()
        if self._worker is not None and not self._worker.done() and self._loop is loop and self._arrived is not None:
            return self._arrived
        if self._loop is not loop:
            self._pending = collections.deque(r for r in self._pending if r.future.get_loop() is loop)
        self._loop, self._arrived, self._stop = loop, asyncio.Event(), threading.Event()
        if self._executor is None:
            self._executor = (
                _compiled_decoding_thread()
                if self._static is not None
                else ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-rollout")
            )
        self._worker = loop.create_task(self._serve(self._arrived, self._stop))
        return self._arrived

    async def _serve(self, arrived: asyncio.Event, stop: threading.Event) -> None:
        batch: list[_Request] = []
        try:
            while True:
                batch = await self._next_batch(arrived)
                if not batch:
                    continue
                await self._run(batch, stop)
                batch = []
        except BaseException as exc:  # closed, cancelled with its loop, or a bug: nobody may hang
            stop.set()
            closed = isinstance(exc, asyncio.CancelledError)
            error = EngineClosedError("rollout engine closed before the request finished") if closed else exc
            _fail(batch + list(self._pending), error)
            self._pending.clear()
            raise

    async def _run(self, batch: list[_Request], stop: threading.Event) -> None:
        """Decode `batch` and settle its callers. A failed batch of several is run again a request at a time, so
        that a request whose input the checks let through fails alone, not with every request batched with it
        (`RequestFailedAlone` where others succeeded alone; the error itself where all failed: the engine's
        fault); no caller is left waiting. Out of memory is not split: it names the setting to lower, where a
        request at a time would hide it behind a batch size of one."""
        try:
            self._settle(batch, await self._decode(batch, stop))
        except Exception as exc:
            live = [r for r in batch if not r.future.done()]
            if len(live) < 2 or stop.is_set() or isinstance(exc, (EngineClosedError, OutOfDeviceMemory)):
                _fail(live, exc)
                return
            self.split_batches += 1
            failed: dict[int, Exception] = {}
            for i, req in enumerate(live):
                try:
                    self._settle([req], await self._decode([req], stop))
                except Exception as exc_alone:  # noqa: BLE001 - judged below, against its batch-mates
                    failed[i] = exc_alone
            blamed = len(failed) < len(live)  # others succeeded alone: each failure is its own input's
            for i, error in failed.items():
                own = blamed and not isinstance(error, EngineClosedError)
                _fail([live[i]], RequestFailedAlone(error) if own else error)

    async def _decode(self, batch: list[_Request], stop: threading.Event) -> list[Completion]:
        if self._executor is None:  # made by _start before the task that calls this
            raise RuntimeError("the rollout engine's batching task runs without its executor")
        return await asyncio.wrap_future(self._executor.submit(self._run_batch, batch, stop))

    @staticmethod
    def _settle(batch: list[_Request], results: list[Completion]) -> None:
        for req, completion in zip(batch, results):
            if not req.future.done():
                req.future.set_result(completion)

    async def _next_batch(self, arrived: asyncio.Event) -> list[_Request]:
        """Up to max_batch_size live requests, waiting at most batch_wait_s after the first."""
        if self._loop is None:  # set by _start with the task that calls this
            raise RuntimeError("the rollout engine's batching task runs without its loop")
        while not self._pending:
            arrived.clear()
            await arrived.wait()
        deadline = self._loop.time() + self.batch_wait_s
        while len(self._pending) < self.max_batch_size:
            remaining = deadline - self._loop.time()
            if self.batch_gap_s is not None:
                remaining = min(remaining, self.batch_gap_s)
            if remaining <= 0:
                break
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), remaining)
            except asyncio.TimeoutError:  # not the builtin before Python 3.11
                break
        take = min(len(self._pending), self.max_batch_size)
        batch = [self._pending.popleft() for _ in range(take)]
        return [r for r in batch if not r.future.done()]  # callers that gave up

    def _run_batch(self, batch: list[_Request], stop: threading.Event) -> list[Completion]:
        """Runs in the worker thread, holding the weights lock for the whole batch."""
        import torch

        with self._lock, torch.inference_mode():
            start = time.perf_counter()
            self.batches_run += 1
            version = self.version  # read under the lock: these weights made the batch
            stops = [self.eos_token_ids + list(r.sampling.stop_token_ids or ()) for r in batch]
            longest = max(r.sampling.max_new_tokens for r in batch)
            lower = (
                f"rollout.max_batch_size (now {self.max_batch_size}; this batch: {len(batch)} rows x up to {longest} "
                "new tokens) or rollout.max_new_tokens"
            )
            try:
                with out_of_memory_named("while generating", lower):
                    run = self._static.decode if self._static is not None else partial(decode, self.model)
                    prompts, params = [r.prompt_ids for r in batch], [r.sampling for r in batch]
                    seeds = [r.seed for r in batch]
                    until = _Abandoned(stop, [r.future for r in batch])
                    rows = run(prompts, params, seeds, stops, self.pad_token_id, until, self._keep_last_logits)
            finally:
                self.busy_intervals.append((start, time.perf_counter()))
        return [
            Completion(
                prompt_ids=req.prompt_ids,
                token_ids=tokens,
                log_probs=log_probs,
                finish_reason="stop" if stopped else "length",
                policy_version=version,
                meta={"seed": req.seed},
            )
            for req, (tokens, log_probs, stopped) in zip(batch, rows)
        ]


_COMPILED_DECODING: ThreadPoolExecutor | None = None


def _compiled_decoding_thread() -> ThreadPoolExecutor:
    """The one thread every compiled engine of this process decodes on, for the process's life. TorchInductor's
    CUDA graphs (`mode="reduce-overhead"`) keep state in the thread that first ran them and assert in any other
    (pytorch#123177, fixed after torch 2.13): an engine closed and started again, or a second one, would fall back
    to eager decoding on a new thread."""
    global _COMPILED_DECODING
    if _COMPILED_DECODING is None:
        _COMPILED_DECODING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-rollout-compiled")
    return _COMPILED_DECODING


class _Abandoned:
    """The decode loop's stop flag for one batch: set when the engine closes, or when every caller of the batch has
    given up (a server's clients that hung up, callers whose wait was cancelled), so no one waits on what is left;
    `left()` names the rows whose caller alone gave up, which the loop stops while their batch-mates go on."""

    def __init__(self, stop: threading.Event, futures: list[asyncio.Future]):
        self.stop, self.futures = stop, futures

    def is_set(self) -> bool:
        return self.stop.is_set() or all(f.done() for f in self.futures)

    def left(self) -> list[int]:
        return [i for i, f in enumerate(self.futures) if f.done()]


def _fail(requests: list[_Request], error: BaseException) -> None:
    for req in requests:
        if not req.future.done() and not req.future.get_loop().is_closed():
            req.future.set_exception(error)


def _check_fits(expected: dict, given: dict) -> None:
    """RuntimeError (as `load_state_dict` raises) unless `given` holds every tensor of `expected`, each its shape."""
    missing = [k for k in expected if k not in given]
    unexpected = [k for k in given if k not in expected]
    wrong = [k for k, v in expected.items() if k in given and tuple(given[k].shape) != tuple(v.shape)]
    if missing or unexpected or wrong:
        raise RuntimeError(
            f"the weights do not fit the model, nothing loaded: missing {missing[:3]}, unexpected {unexpected[:3]}, "
            f"other shapes {wrong[:3]}"
        )
