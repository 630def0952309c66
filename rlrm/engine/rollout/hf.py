"""The embedded rollout engine: a transformers causal LM behind the async per-request interface.

    engine = HFRolloutEngine(model, eos_token_ids=[2], pad_token_id=0)
    done = await asyncio.gather(*(engine.generate(ids, SamplingParams(seed=i)) for i, ids in enumerate(prompts)))

Requests wait in a queue; a background task takes up to `max_batch_size` of them (waiting at
most `batch_wait_ms` for more after the first), left-pads them and runs one KV-cached decode loop.
The loop runs on the event loop's thread and yields to it after every token, so rewards and new
requests make progress while it runs. (A worker thread would free the loop too, but on a small CPU
its OpenMP team competes with the main thread's spinning one: measured 1.4x slower decoding.)
Each request samples with its own seeded generator, so its tokens do not depend on what else was
batched. New weights are applied between batches, never inside one.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

from rlrm.engine.rollout.base import Completion, SamplingParams


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future


class HFRolloutEngine:
    """Dynamic-batching generation with a transformers model (CPU or GPU)."""

    def __init__(self, model, eos_token_ids: list[int], pad_token_id: int, max_batch_size: int = 64, batch_wait_ms: float = 2.0):
        self.model = model.eval()
        self.eos_token_ids = list(eos_token_ids)
        self.pad_token_id = pad_token_id
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_ms / 1000.0
        self.version = 0
        self.batches_run = 0  # decode loops run so far (how well requests were batched)
        self._pending_lock = threading.Lock()
        self._pending: tuple[dict, int] | None = None  # weights waiting for the current batch to end
        self._decoding = False
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self._max_len = getattr(model.config, "max_position_embeddings", None)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """Generate one response; raises ValueError at once for an unusable request."""
        prompt_ids = list(prompt_ids)
        if not prompt_ids:
            raise ValueError("empty prompt: a request needs at least one prompt token")
        if sampling.max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be > 0, got {sampling.max_new_tokens}")
        if self._max_len and len(prompt_ids) + sampling.max_new_tokens > self._max_len:
            raise ValueError(
                f"prompt of {len(prompt_ids)} tokens + {sampling.max_new_tokens} new tokens exceeds the model's "
                f"{self._max_len} positions"
            )
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done():
            self._queue = asyncio.Queue()
            self._worker = loop.create_task(self._serve())
        future = loop.create_future()
        self._queue.put_nowait(_Request(prompt_ids, sampling, future))
        return await future

    async def generate_many(self, prompts: list[list[int]], samplings: list[SamplingParams]) -> list[Completion]:
        """Generate several requests concurrently; results keep the input order."""
        return list(await asyncio.gather(*(self.generate(p, s) for p, s in zip(prompts, samplings))))

    def update_weights(self, state_dict: dict, version: int) -> None:
        """Load new policy weights now, or after the batch being decoded; its completions keep the old version."""
        with self._pending_lock:
            self._pending = (state_dict, version)
            if not self._decoding:
                self._apply_pending()

    def _apply_pending(self) -> None:
        if self._pending is not None:
            state_dict, version = self._pending
            self.model.load_state_dict(state_dict)
            self.version, self._pending = version, None

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            deadline = loop.time() + self.batch_wait_s
            while len(batch) < self.max_batch_size:
                try:
                    batch.append(self._queue.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), remaining))
                except asyncio.TimeoutError:
                    break
            batch = [r for r in batch if not r.future.done()]  # callers that gave up
            if not batch:
                continue
            try:
                results = await self._decode(batch)
            except Exception as exc:  # never leave a caller waiting forever
                for req in batch:
                    if not req.future.done():
                        req.future.set_exception(exc)
                continue
            for req, completion in zip(batch, results):
                if not req.future.done():
                    req.future.set_result(completion)

    async def _decode(self, batch: list[_Request]) -> list[Completion]:
        import torch

        with self._pending_lock:
            self._apply_pending()
            self._decoding = True
        self.batches_run += 1
        steps = _decode_batch(self.model, batch, self.eos_token_ids, self.pad_token_id, self.version)
        try:
            while True:
                with torch.inference_mode():
                    next(steps)
                await asyncio.sleep(0)  # let rewards and new requests run between tokens
        except StopIteration as done:
            return done.value
        finally:
            with self._pending_lock:
                self._decoding = False
                self._apply_pending()


def _decode_batch(model, batch: list[_Request], eos_ids: list[int], pad_id: int, version: int):
    """A generator: one decode step per `next()`; returns the completions when every row is done."""
    import torch

    device = next(model.parameters()).device
    rows = len(batch)
    width = max(len(r.prompt_ids) for r in batch)
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    for i, req in enumerate(batch):
        input_ids[i, width - len(req.prompt_ids) :] = torch.tensor(req.prompt_ids)
        mask[i, width - len(req.prompt_ids) :] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, P]

    sampler = _RowSampler([r.sampling for r in batch], device)
    limits = torch.tensor([r.sampling.max_new_tokens for r in batch], device=device)
    eos = torch.tensor(eos_ids, device=device)
    tokens_out = torch.full((rows, int(limits.max())), pad_id, dtype=torch.long, device=device)
    logp_out = torch.zeros((rows, int(limits.max())), dtype=torch.float32, device=device)
    lengths = torch.zeros(rows, dtype=torch.long, device=device)
    stopped = torch.zeros(rows, dtype=torch.bool, device=device)  # ended on EOS
    active = torch.ones(rows, dtype=torch.bool, device=device)

    out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True)
    past, logits = out.past_key_values, out.logits[:, -1, :].float()  # [B, V]
    next_pos = positions[:, -1] + 1  # [B]
    for t in range(int(limits.max())):
        yield
        token, logp = sampler.sample(logits, active)  # [B], [B]
        tokens_out[:, t] = torch.where(active, token, tokens_out[:, t])
        logp_out[:, t] = torch.where(active, logp, logp_out[:, t])
        lengths += active.long()
        hit_eos = active & torch.isin(token, eos)
        stopped |= hit_eos
        active &= ~hit_eos & (lengths < limits)
        if not bool(active.any()):
            break
        mask = torch.cat([mask, torch.ones((rows, 1), dtype=mask.dtype, device=device)], dim=1)
        feed = torch.where(active, token, torch.full_like(token, pad_id))
        out = model(
            input_ids=feed[:, None], attention_mask=mask, position_ids=next_pos[:, None], past_key_values=past, use_cache=True
        )
        past, logits = out.past_key_values, out.logits[:, -1, :].float()
        next_pos = next_pos + 1

    tokens_cpu, logp_cpu, lengths_cpu = tokens_out.cpu(), logp_out.cpu(), lengths.cpu().tolist()
    return [
        Completion(
            prompt_ids=req.prompt_ids,
            token_ids=tokens_cpu[i, : lengths_cpu[i]].tolist(),
            log_probs=logp_cpu[i, : lengths_cpu[i]].tolist(),
            finish_reason="stop" if bool(stopped[i]) else "length",
            policy_version=version,
        )
        for i, req in enumerate(batch)
    ]


class _RowSampler:
    """Per-row temperature, top-k, top-p and seeded Gumbel-max sampling over a [B, V] batch.

    Each row draws its uniforms from its own generator, `chunk` decode steps at a time; the chunk
    size depends on the vocabulary only, so a request consumes the same random numbers whatever
    else shares its batch.
    """

    def __init__(self, params: list[SamplingParams], device):
        import torch

        self.temps = torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device)
        self.greedy = self.temps <= 0
        self.greedy_rows = self.greedy.tolist()
        self.safe_temps = torch.where(self.greedy, torch.ones_like(self.temps), self.temps)[:, None]  # [B, 1]
        self.top_k = [p.top_k for p in params]
        self.top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device)[:, None]
        self.filtering = any(k > 0 for k in self.top_k) or bool((self.top_p < 1.0).any())
        self.generators = []
        for p in params:
            g = torch.Generator()  # CPU generator: identical draws on every device
            g.manual_seed(p.seed if p.seed is not None else int(torch.randint(0, 2**62, (1,))))
            self.generators.append(g)
        self.device = device
        self.step = 0
        self.noise = None  # [B, chunk, V] uniforms of the current chunk

    def sample(self, logits, active):
        import torch

        scaled = logits / self.safe_temps  # [B, V]
        logp_all = torch.log_softmax(scaled, dim=-1)
        filtered = self._filter(scaled) if self.filtering else scaled
        rows, vocab = logits.shape
        chunk = max(1, 2**16 // vocab)
        offset = self.step % chunk
        if offset == 0:
            self.noise = torch.full((rows, chunk, vocab), 0.5, dtype=torch.float32)
            for i, is_active in enumerate(active.tolist()):
                if is_active and not self.greedy_rows[i]:
                    torch.rand((chunk, vocab), generator=self.generators[i], out=self.noise[i])
        self.step += 1
        uniform = self.noise[:, offset, :].to(self.device)
        gumbel = -torch.log(-torch.log(uniform.clamp(min=1e-20, max=1.0 - 1e-7)))
        sampled = torch.argmax(filtered + gumbel, dim=-1)
        token = torch.where(self.greedy, torch.argmax(scaled, dim=-1), sampled)  # [B]
        return token, logp_all.gather(-1, token[:, None]).squeeze(-1)

    def _filter(self, scaled):
        import torch

        sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)  # [B, V]
        vocab = scaled.shape[-1]
        ranks = torch.arange(vocab, device=scaled.device)[None, :]
        k = torch.tensor([kk if kk > 0 else vocab for kk in self.top_k], device=scaled.device)[:, None]
        drop = ranks >= k
        probs = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
        mass_before = probs.cumsum(-1) - probs  # probability of strictly better tokens
        drop |= mass_before >= self.top_p  # the first token always stays
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        return torch.empty_like(scaled).scatter_(-1, order, sorted_logits)
