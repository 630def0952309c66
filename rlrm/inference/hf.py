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
once at most half of it is still decoding, so a few long responses do not pay for the finished ones.

Sampling is inverse-CDF with one uniform per row and token drawn from that request's own seeded
generator, so a request draws the same tokens whatever else shares its batch. New weights are
loaded under a lock the decode loop holds for a whole batch: never inside one.

Longer than most modules on purpose: the queue, the batch former, the decode loop and the
sampler share the engine's lock, versioning and per-row state; split apart, each piece would
reach into the others' fields.
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

from rlrm.errors import out_of_memory_named
from rlrm.inference.base import Completion, EngineClosedError, SamplingParams
from rlrm.inference.kv_cache import cache_of, pass_cache, rows_selectable


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
        self.busy_intervals: list[tuple[float, float]] = []  # (start, end) perf_counter of each decode batch
        self._max_len = getattr(model.config, "max_position_embeddings", None)
        self._vocab = model.get_input_embeddings().num_embeddings
        self._keep_last_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
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
        """The model's parameter dtype (a torch.dtype): with the actor's, its log-probs match the actor's."""
        return next(self.model.parameters()).dtype

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
            self.model.load_state_dict(state_dict)
            self.version = version

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
        seed = sampling.seed if sampling.seed is not None else self._seeds.getrandbits(63)
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
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-rollout")
        self._worker = loop.create_task(self._serve(self._arrived, self._stop))
        return self._arrived

    async def _serve(self, arrived: asyncio.Event, stop: threading.Event) -> None:
        if self._executor is None:  # made by _start before this task
            raise RuntimeError("the rollout engine's batching task started without its executor")
        batch: list[_Request] = []
        try:
            while True:
                batch = await self._next_batch(arrived)
                if not batch:
                    continue
                try:
                    results = await asyncio.wrap_future(self._executor.submit(self._run_batch, batch, stop))
                except Exception as exc:  # a failed batch fails its callers, never leaves them waiting
                    _fail(batch, exc)
                else:
                    for req, completion in zip(batch, results):
                        if not req.future.done():
                            req.future.set_result(completion)
                batch = []
        except BaseException as exc:  # closed, cancelled with its loop, or a bug: nobody may hang
            stop.set()
            closed = isinstance(exc, asyncio.CancelledError)
            error = EngineClosedError("rollout engine closed before the request finished") if closed else exc
            _fail(batch + list(self._pending), error)
            self._pending.clear()
            raise

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
            except TimeoutError:
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
                    rows = _decode(self.model, batch, stops, self.pad_token_id, stop, self._keep_last_logits)
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


def _fail(requests: list[_Request], error: BaseException) -> None:
    for req in requests:
        if not req.future.done() and not req.future.get_loop().is_closed():
            req.future.set_exception(error)


def _decode(model, batch: list[_Request], stops: list[list[int]], pad_id: int, stop_flag, keep_last: bool):
    """Prefill then KV-cached decoding of one left-padded batch.

    Returns (token_ids, log_probs, stopped_on_stop_token) per request, in batch order.
    """
    import torch

    device = next(model.parameters()).device
    rows = len(batch)
    limits = [r.sampling.max_new_tokens for r in batch]
    steps = max(limits)
    widest_stop = max(1, max(len(s) for s in stops))
    row = {  # per-row decoding state, [B, ...]; rows leave together when the batch is compacted
        "orig": torch.arange(rows, device=device),
        "limit": torch.tensor(limits, device=device),
        "stops": torch.tensor([s + [-1] * (widest_stop - len(s)) for s in stops], device=device),  # [B, S]
        "tokens": torch.full((rows, steps), pad_id, dtype=torch.long, device=device),
        "log_probs": torch.zeros((rows, steps), dtype=torch.float32, device=device),
        "length": torch.zeros(rows, dtype=torch.long, device=device),
        "stopped": torch.zeros(rows, dtype=torch.bool, device=device),
        "active": torch.ones(rows, dtype=torch.bool, device=device),
    }
    sampler = _RowSampler([r.sampling for r in batch], [r.seed for r in batch], steps, device)
    results: list = [None] * rows

    mask, past, logits = _prefill(model, [r.prompt_ids for r in batch], pad_id, device, keep_last)
    next_pos = mask.sum(-1)  # [B]: a left-padded prompt's next position is its length
    compactable = rows_selectable(past)
    for t in range(steps):
        if stop_flag.is_set():
            raise EngineClosedError("rollout engine closed before the request finished")
        token, log_prob = sampler.sample(logits, t)  # [B], [B]
        active = row["active"]
        row["tokens"][:, t] = token  # rows already done write past their length: never read
        row["log_probs"][:, t] = log_prob
        row["length"] += active.long()
        hit = active & (token[:, None] == row["stops"]).any(-1)
        row["stopped"] |= hit
        active &= ~hit & (row["length"] < row["limit"])
        live = int(active.sum())  # the one host sync per token, as in HF generate
        if live == 0:
            break
        current = active.shape[0]
        if live <= current // 2 and compactable:
            keep = active.nonzero().squeeze(-1)
            _collect(row, ~active, results)
            row = {k: v[keep] for k, v in row.items()}
            sampler.select(keep)
            past.batch_select_indices(keep)
            mask, next_pos, token = mask[keep], next_pos[keep], token[keep]
            active = row["active"]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        feed = torch.where(active, token, torch.full_like(token, pad_id))
        out = model(
            input_ids=feed[:, None],
            attention_mask=mask,
            position_ids=next_pos[:, None],
            **pass_cache(past),
            use_cache=True,
        )
        past, logits = cache_of(out), out.logits[:, -1, :].float()
        next_pos = next_pos + 1
    _collect(row, torch.ones_like(row["active"]), results)
    return results


def _prefill(model, prompts: list[list[int]], pad_id: int, device, keep_last: bool, share: bool = True):
    """Run the left-padded prompts, each distinct prompt once (see `rlrm.inference.kv_cache`).

    Returns:
        (attention mask [B, P], KV cache of B rows, logits [B, V] float32 of each prompt's last position).
    """
    import torch

    distinct: dict[tuple[int, ...], int] = {}
    inverse = [distinct.setdefault(tuple(p), len(distinct)) if share else i for i, p in enumerate(prompts)]
    unique = list(distinct) if share else prompts
    width = max(len(p) for p in unique)
    input_ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in unique], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in unique], device=device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [G, P]
    extra = {"logits_to_keep": 1} if keep_last else {}
    out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True, **extra)
    past, logits = cache_of(out), out.logits[:, -1, :].float()  # [G, V]
    if len(unique) == len(prompts):
        return mask, past, logits
    if not rows_selectable(past):
        return _prefill(model, prompts, pad_id, device, keep_last, share=False)
    index = torch.tensor(inverse, device=device)
    past.batch_select_indices(index)
    return mask[index], past, logits[index]


def _collect(row: dict, which, results: list) -> None:
    """Copy the finished rows picked by `which` [B] to Python lists, at their original index."""
    picked = which.nonzero().squeeze(-1)
    orig = row["orig"][picked].tolist()
    tokens, log_probs = row["tokens"][picked].cpu(), row["log_probs"][picked].cpu()
    lengths, stopped = row["length"][picked].tolist(), row["stopped"][picked].tolist()
    for j, i in enumerate(orig):
        n = lengths[j]
        results[i] = (tokens[j, :n].tolist(), log_probs[j, :n].tolist(), bool(stopped[j]))


class _RowSampler:
    """Per-row temperature, top-k, top-p and seeded inverse-CDF sampling over a [B, V] batch.

    Row i draws uniform t for its token t from its own generator, up front, so what it samples
    does not depend on the other rows. Unfiltered rows invert the CDF in vocabulary order,
    filtered rows in (stable) descending-probability order; each row always uses the same one.
    """

    def __init__(self, params: list[SamplingParams], seeds: list[int], steps: int, device):
        import torch

        temps = torch.tensor([p.temperature for p in params], dtype=torch.float32)
        self.greedy = (temps <= 0).to(device)  # [B]
        self.temps = torch.where(temps <= 0, torch.ones_like(temps), temps)[:, None].to(device)  # [B, 1]
        self.top_k = torch.tensor([p.top_k if p.top_k > 0 else 2**62 for p in params], device=device)[:, None]
        self.top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device)[:, None]
        self.filtered = torch.tensor([p.top_k > 0 or p.top_p < 1.0 for p in params], device=device)  # [B]
        uniforms = torch.full((len(params), steps), 0.5)
        for i, (p, seed) in enumerate(zip(params, seeds)):
            if p.temperature > 0:
                g = torch.Generator().manual_seed(seed)  # CPU generator: the same draws on every device
                uniforms[i, : p.max_new_tokens] = torch.rand(p.max_new_tokens, generator=g)
        self.uniforms = uniforms.to(device)  # [B, T]
        self._refresh()

    def _refresh(self) -> None:
        self.all_greedy = bool(self.greedy.all())
        self.any_filtered = bool((self.filtered & ~self.greedy).any())

    def select(self, keep) -> None:
        """Keep only rows `keep` (the batch was compacted)."""
        for name in ("greedy", "temps", "top_k", "top_p", "filtered", "uniforms"):
            setattr(self, name, getattr(self, name)[keep])
        self._refresh()

    def sample(self, logits, t: int):
        """Tokens [B] for decode step t and their log-probs [B] (float32, before filtering)."""
        import torch

        log_probs = torch.log_softmax(logits / self.temps, dim=-1)  # [B, V]
        if self.all_greedy:
            token = torch.argmax(logits, dim=-1)
        else:
            probs = log_probs.exp()
            u = self.uniforms[:, t]  # [B]
            token = _invert_cdf(probs, u)
            if self.any_filtered:
                token = torch.where(self.filtered, self._sample_filtered(probs, u), token)
            token = torch.where(self.greedy, torch.argmax(logits, dim=-1), token)
        return token, log_probs.gather(-1, token[:, None]).squeeze(-1)

    def _sample_filtered(self, probs, u):
        import torch

        sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)  # [B, V]
        ranks = torch.arange(probs.shape[-1], device=probs.device)[None, :]
        sorted_p = sorted_p.masked_fill(ranks >= self.top_k, 0.0)
        cum = sorted_p.cumsum(-1)
        mass_before = cum - sorted_p  # mass of strictly better tokens; the best token always stays
        sorted_p = sorted_p.masked_fill(mass_before >= self.top_p * cum[:, -1:], 0.0)
        return order.gather(-1, _invert_cdf(sorted_p, u)[:, None]).squeeze(-1)


def _invert_cdf(weights, u):
    """Index [B] where the running sum of non-negative `weights` [B, V] first exceeds u * total."""
    import torch

    cdf = weights.cumsum(-1)  # [B, V]
    total = cdf[:, -1]
    target = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))  # strictly below total
    index = torch.searchsorted(cdf, target[:, None], right=True).squeeze(-1)
    return index.clamp(max=weights.shape[-1] - 1)
