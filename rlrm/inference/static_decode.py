"""Compiled decoding: a static KV cache and one fixed-shape decode step, replayed as a CUDA graph on a GPU.

    decoder = StaticDecoder(model, "cudagraphs", max_batch_size=64)
    rows = decoder.decode(prompts, params, seeds, stops, pad_id, stop_flag, keep_last)

Why: a transformers decode step is hundreds of small kernels launched one by one from Python; for a model
of a few hundred million parameters the GPU waits on the launches far longer than it computes. Captured
once as a CUDA graph, a step is replayed with one launch. A graph needs fixed shapes and addresses, so each
batch decodes in a *bucket* of R rows x L slots that holds everything the step reads:

- a transformers `StaticCache`; R rounds the batch up to 8, 16, 32, ... (at most `max_batch_size`), L rounds
  prompt width + new tokens up to a multiple of 64. The padding rows take row 0's prompt (prefilled
  once, shared), then only feed padding, and are never returned;
- the step's inputs, written in place: token ids [R, 1], positions [R, 1] and the attention mask [R, L], a
  slot switched on as it is written;
- the step: a CUDA graph captured when the bucket is made ("cudagraphs": `torch.cuda.CUDAGraph`, no
  compiler; weights and cache are read where they are, so new weights loaded in place reach it), a
  `torch.compile`d function ("inductor": fused kernels, and CUDA graphs on a GPU, mode reduce-overhead; a
  minute or more to compile per shape), or the plain forward ("eager": the same buffers and loop, nothing
  captured, on any device).

Rows that finish feed padding; how many rows are left is read back every `CHECK_EVERY` tokens (so the host
queues steps ahead), and once they fit a smaller row bucket the batch moves on to it (cache rows, mask and
positions copied), as the dynamic loop drops finished rows; the buckets of such a ladder are kept, so the next
batch finds them captured. (Not under "inductor", where each smaller bucket would be a new compile.) Attention packs
the query heads that share a key/value head onto it (grouped-query attention, as transformers does in
eager decoding; inside a compiled step transformers copies every key/value head once per query head, the
whole cache each step). The prompt is prefilled as in the dynamic loop (each distinct prompt once) and
copied into the bucket's cache. Tokens and log-probs equal the dynamic loop's up to float rounding.

Where it cannot work it says so once on stderr and decodes another way: a model whose cache has
sliding-window or other non-static layers uses the dynamic loop; a bucket whose graph capture or compile
fails (torch's recompile limit, an operation a graph cannot hold) runs its steps uncompiled.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from typing import Any

from rlrm.inference.base import EngineClosedError, SamplingParams
from rlrm.inference.decode import CHECK_EVERY, Decoded, advance, collect, decode, drop_left, prefill, row_state
from rlrm.inference.kv_cache import cache_keyword
from rlrm.inference.packed_attention import use_packed_attention
from rlrm.inference.sampling import RowSampler

BACKENDS = ("cudagraphs", "inductor", "eager")
SLOT_MULTIPLE = 64  # cache lengths are multiples of this
KEPT_BUCKETS = 8  # buckets (caches, buffers, graphs) kept for reuse, the newest; their memory stays allocated
GRAPH_DEVICES = ("cuda",)  # device types whose decode steps CUDA graphs capture (tests add their stand-in GPU's)


def captures_graphs(device) -> bool:
    """Whether "cudagraphs" can capture decode steps on `device` (a torch.device, or a name such as "cuda:1")."""
    return str(device).partition(":")[0] in GRAPH_DEVICES


class _Bucket:
    """One (rows, slots) shape: its static cache, the step's input buffers and the step itself."""

    def __init__(self, cache, rows: int, slots: int, device):
        import torch

        self.cache = cache
        self.ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.positions = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.mask = torch.zeros((rows, slots), dtype=torch.long, device=device)
        self.graph: Any = None  # a torch.cuda.CUDAGraph ("cudagraphs")
        self.logits: Any = None  # the graph's output buffer, overwritten by each replay
        self.compiled = True  # False: the step runs uncompiled (its capture or compile failed)

    def reset(self) -> None:
        self.cache.reset()
        self.mask.zero_()


class StaticDecoder:
    """Decodes batches with a static KV cache and a captured or compiled decode step.

    Args:
        model: a transformers causal LM whose forward takes a `StaticCache` (Llama, Qwen2, ...). When it runs
            sdpa attention, it is switched to rlrm's packed grouped-query attention (`rlrm.inference.packed_attention`).
        backend: "cudagraphs" (CUDA only), "inductor" or "eager"; see the module docstring.
        max_batch_size: the engine's largest batch (the largest row bucket).

    Raises:
        ValueError: an unknown backend, or "cudagraphs" with the model off CUDA.
    """

    def __init__(self, model, backend: str, max_batch_size: int):
        import torch

        if backend not in BACKENDS:
            raise ValueError(f"unknown compile backend {backend!r}: choose one of {', '.join(BACKENDS)}")
        self.model = model
        self.backend = backend
        self.device = next(model.parameters()).device
        if backend == "cudagraphs" and not captures_graphs(self.device):
            raise ValueError(f"compiled decoding with CUDA graphs needs the model on CUDA, not {self.device}")
        self.max_batch_size = max_batch_size
        self.captured = 0  # buckets whose step became a CUDA graph or a compiled function
        self._keyword = cache_keyword()
        self._buckets: OrderedDict[tuple[int, int], _Bucket] = OrderedDict()
        self._weights_at: tuple[int, ...] = ()  # where the parameters were when the buckets' steps were made
        self._warned: set[str] = set()
        self._static_layers = _static_layers_only(model.config)
        if not self._static_layers:
            self._warn(
                "static", "this model's KV cache has sliding-window or other non-static layers: decoding eagerly"
            )
        if getattr(model.config, "_attn_implementation", None) == "sdpa":
            use_packed_attention(model)
        self._pool = torch.cuda.graph_pool_handle() if backend == "cudagraphs" else None
        self._capture_stream = torch.cuda.Stream(device=self.device) if backend == "cudagraphs" else None
        self._compiled = None
        if backend == "inductor":
            mode = "reduce-overhead" if self.device.type == "cuda" else None
            self._compiled = torch.compile(self._forward, mode=mode, fullgraph=True, dynamic=False)

    def _forward(self, ids, mask, positions, cache):
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **{self._keyword: cache}
        )
        return out.logits[:, -1, :].float()

    def rows_for(self, batch: int) -> int:
        """The row bucket a batch of `batch` requests decodes in."""
        rows = 8
        while rows < batch:
            rows *= 2
        return max(batch, min(rows, self.max_batch_size))

    @staticmethod
    def slots_for(length: int) -> int:
        """The cache length a batch of prompt width + new tokens `length` decodes in (attention reads all of it
        from the first step on, where the eager loop reads what is written so far)."""
        return max(1, -(-length // SLOT_MULTIPLE)) * SLOT_MULTIPLE

    def decode(
        self,
        prompts: list[list[int]],
        params: list[SamplingParams],
        seeds: list[int],
        stops: list[list[int]],
        pad_id: int,
        stop_flag,
        keep_last: bool,
    ) -> list[Decoded]:
        """Same contract as `rlrm.inference.decode.decode`."""
        import contextlib

        import torch

        if not self._static_layers:
            return decode(self.model, prompts, params, seeds, stops, pad_id, stop_flag, keep_last)
        # streams, graphs and kernels on the model's GPU, not the thread's current one (cuda:0 unless set)
        on_device = torch.cuda.device(self.device) if self.device.type == "cuda" else contextlib.nullcontext()
        with on_device:
            return self._decode(prompts, params, seeds, stops, pad_id, stop_flag, keep_last)

    def _decode(self, prompts, params, seeds, stops, pad_id: int, stop_flag, keep_last: bool) -> list[Decoded]:
        import torch

        weights_at = tuple(t.data_ptr() for t in (*self.model.parameters(), *self.model.buffers()))
        if weights_at != self._weights_at:  # moved (a server's sleep and wake): graphs would read the old memory
            self.release()
            self._weights_at = weights_at
        count, device = len(prompts), self.device
        rows = self.rows_for(count)
        prompts = prompts + [prompts[0]] * (rows - count)  # padding rows: row 0 again, prefilled with it
        params = params + [params[0]] * (rows - count)
        seeds = seeds + [seeds[0]] * (rows - count)
        stops = stops + [stops[0]] * (rows - count)
        steps = max(p.max_new_tokens for p in params)
        row = row_state(params, stops, pad_id, device, real=count)  # padding rows: never active nor collected
        sampler = RowSampler(params, seeds, steps, device)
        results: list = [None] * count

        width = max(len(p) for p in prompts)
        slots = self.slots_for(width + steps)
        bucket = self._bucket(rows, slots)
        prompt_mask, past, logits = prefill(self.model, prompts, pad_id, device, keep_last)
        for layer, filled in enumerate(past.layers):  # the prompts' keys/values into slots [0, width)
            bucket.cache.update(filled.keys, filled.values, layer)
        del past
        bucket.mask[:, :width] = prompt_mask
        bucket.positions.copy_(prompt_mask.sum(-1, keepdim=True))  # a left-padded prompt's next position: its length
        for t in range(steps):
            if stop_flag.is_set():
                raise EngineClosedError("rollout engine closed before the request finished")
            token, log_prob = sampler.sample(logits, t)
            active = advance(row, token, log_prob, t)
            if t == steps - 1:
                break
            if t % CHECK_EVERY == CHECK_EVERY - 1:
                drop_left(row, stop_flag)
                live = int(active.sum())  # the host sync, every CHECK_EVERY tokens
                if live == 0:
                    break
                smaller = self.rows_for(live)
                # at most half the rows left: on to a smaller bucket (not under inductor: each is a new compile)
                if smaller < rows and self.backend != "inductor":
                    keep = active.nonzero().squeeze(-1)
                    index = torch.cat([keep, keep[:1].expand(smaller - live)])  # padding rows: a live one again
                    moved = self._moved(bucket, index, smaller, slots)
                    if moved is not None:
                        collect(row, ~active & (row["orig"] >= 0), results)
                        row = {k: v[index] for k, v in row.items()}
                        row["orig"][live:], row["active"][live:] = -1, False
                        sampler.select(index)
                        token, rows, bucket = token[index], smaller, moved
                        active = row["active"]
            bucket.mask[:, width + t] = 1
            bucket.ids.copy_(torch.where(active, token, torch.full_like(token, pad_id))[:, None])
            logits = self._step(bucket)
            bucket.positions += 1
        collect(row, row["orig"] >= 0, results)
        return results

    def _moved(self, bucket: _Bucket, index, rows: int, slots: int) -> _Bucket | None:
        """The (rows, slots) bucket holding rows `index` of `bucket` (cache, mask and positions copied), or None
        when making it ran out of memory: the batch then goes on in `bucket`, saying so once."""
        import torch

        try:
            smaller = self._bucket(rows, slots, empty=False)  # every tensor below is overwritten whole
        except torch.OutOfMemoryError:
            self._warn("move", f"a smaller bucket ({rows} rows) did not fit in memory: the batch goes on as it is")
            return None
        for old, new in zip(bucket.cache.layers, smaller.cache.layers):
            torch.index_select(old.keys, 0, index, out=new.keys)
            torch.index_select(old.values, 0, index, out=new.values)
            new.cumulative_length.copy_(old.cumulative_length)
        torch.index_select(bucket.mask, 0, index, out=smaller.mask)
        torch.index_select(bucket.positions, 0, index, out=smaller.positions)
        return smaller

    def release(self) -> None:
        """Drop every bucket (caches, buffers, graphs): their memory goes back to torch's allocator. The next
        batch makes its bucket again. Call it where no batch is decoding (the engine's lock held)."""
        import torch

        self._buckets.clear()
        if self._pool is not None:  # the old pool may keep a use from memory its graphs left behind: start afresh
            self._pool = torch.cuda.graph_pool_handle()

    def _step(self, bucket: _Bucket):
        """The next logits [R, V] float32 from the bucket's inputs; the cache takes the fed tokens."""
        import torch

        if bucket.graph is not None:
            bucket.graph.replay()
            return bucket.logits.clone()  # the next replay overwrites the buffer
        if self._compiled is not None and bucket.compiled:
            torch.compiler.cudagraph_mark_step_begin()  # the last step's outputs were read: its buffers may go
            try:
                return self._compiled(bucket.ids, bucket.mask, bucket.positions, bucket.cache).clone()
            except torch.OutOfMemoryError:
                raise
            except Exception as exc:  # a compile that fails (recompile limit, graph break) before the step ran
                bucket.compiled = False
                self._warn("compile", f"compiling a decode step failed ({type(exc).__name__}): decoding uncompiled")
        return self._forward(bucket.ids, bucket.mask, bucket.positions, bucket.cache)

    def _bucket(self, rows: int, slots: int, empty: bool = True) -> _Bucket:
        """This shape's bucket, emptied unless asked not to; made (and its step captured) on first use, the oldest
        dropped."""
        from transformers import StaticCache

        key = (rows, slots)
        bucket = self._buckets.pop(key, None)
        if bucket is None:
            while len(self._buckets) >= KEPT_BUCKETS:
                self._buckets.popitem(last=False)
            cache = StaticCache(config=self.model.config, max_cache_len=slots)
            bucket = _Bucket(cache, rows, slots, self.device)
            self._fill(bucket)
            if self.backend == "cudagraphs":
                self._capture(bucket)
            elif self.backend == "inductor":
                import torch

                for buffer in (bucket.ids, bucket.positions, bucket.mask):  # graphs may read them in place
                    torch._dynamo.mark_static_address(buffer)
                self.captured += 1
        if empty:
            bucket.reset()
        self._buckets[key] = bucket
        return bucket

    def _fill(self, bucket: _Bucket) -> None:
        """Allocate the cache's tensors (transformers makes them on the first write) at the model's dtype."""
        import torch

        dtype = next(self.model.parameters()).dtype
        config = self.model.config
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads  # GPT-2, OPT: none
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        rows = bucket.ids.shape[0]
        empty = torch.zeros((rows, heads, 0, head_dim), dtype=dtype, device=self.device)
        for layer in range(len(bucket.cache.layers)):
            bucket.cache.update(empty, empty, layer)

    def _capture(self, bucket: _Bucket) -> None:
        """Record the bucket's step as a CUDA graph, and check one replay against the eager step.

        Two warm-up steps run first on the capture stream, as CUDA asks. The capture is thread-local: the
        trainer's own CUDA calls on other threads (its allocator, NCCL) go on while a step is recorded."""
        import torch

        stream = self._capture_stream
        if stream is None:  # made with the decoder for "cudagraphs", the only backend that captures
            raise RuntimeError("a CUDA graph capture without its stream")
        graph = torch.cuda.CUDAGraph()
        bucket.mask[:, 0] = 1  # the steps below attend to one slot (an all-masked row is not worth a NaN)
        step = (bucket.ids, bucket.mask, bucket.positions, bucket.cache)
        try:
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # also restores the thread's stream when the capture fails
                for _ in range(2):
                    self._forward(*step)
                with torch.cuda.graph(graph, pool=self._pool, stream=stream, capture_error_mode="thread_local"):
                    bucket.logits = self._forward(*step)
            torch.cuda.current_stream().wait_stream(stream)
            # the check: another token than at capture, so a graph that recorded nothing keeps stale logits
            bucket.reset()
            bucket.mask[:, 0] = 1
            bucket.ids.fill_(1)
            expected = self._forward(*step)
            bucket.reset()
            bucket.mask[:, 0] = 1
            graph.replay()
            if not torch.allclose(bucket.logits, expected, rtol=0.02, atol=0.02, equal_nan=True):
                raise RuntimeError("its replay does not give the eager step's logits (was anything recorded?)")
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # an operation the graph cannot hold: the bucket decodes uncompiled
            self._warn("capture", f"capturing a decode step as a CUDA graph failed ({exc}): decoding uncompiled")
            return
        bucket.graph = graph
        self.captured += 1

    def _warn(self, kind: str, text: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            print(f"warning: rollout.compile={self.backend}: {text}", file=sys.stderr, flush=True)


def _static_layers_only(config) -> bool:
    """Whether transformers' StaticCache for this model holds only plain static layers (sliding-window layers
    count a Python int per token: every step would be a new shape)."""
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer

    layers = StaticCache(config=config, max_cache_len=SLOT_MULTIPLE).layers
    return bool(layers) and all(type(layer) is StaticLayer for layer in layers)
