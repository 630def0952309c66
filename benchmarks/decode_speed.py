"""The in-process rollout engine's decoding, eager against compiled (`rollout.compile`): tokens/s, the share of
the memory-bandwidth bound it reaches, peak memory, and the largest batch the memory would hold.

    .venv/bin/python benchmarks/decode_speed.py [--device cuda] [--shape qwen2.5-0.5b] [--dtype bfloat16]
        [--compile cudagraphs] [--prompts 32] [--n 8] [--prompt-spread 0] [--new-tokens 128] [--pairs 3] [--threads 1]

One batch of `--prompts` x `--n` requests (GRPO groups: each prompt prefilled once; `--prompt-spread` makes
the prompts' lengths differ, so the batch is left-padded), every row running to `--new-tokens` (no EOS),
sampled at temperature 1 with seeds. The compiled side runs once untimed (its compile or graph capture), then
the sides alternate `--pairs` times (eager, compiled, eager, ...): the figure to quote is the median of the
pair ratios. Both sides' tokens are compared (the equal rows are counted).

The bandwidth bound: a decode step reads every weight once and the KV cache written so far, so at batch B
it makes at most B tokens per (weight bytes + mean KV bytes) / bandwidth, with the bandwidth measured here
as a large device-to-device copy (read + write). A step that reaches a small share of it waits on something
else: on a GPU, kernel launches (what CUDA graphs remove). The largest batch: peak memory measured at B and
B/2, extended as a straight line to the device's memory (an estimate, not a run).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import shaped_policy, sync


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shape", help="a random-weight policy of this shape (e.g. qwen2.5-0.5b) instead of tiny")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument(
        "--compile",
        default=None,
        help="the compiled side: cudagraphs (CUDA default), inductor (CPU default) or eager (static cache, nothing compiled)",
    )
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--n", type=int, default=8, help="samples per prompt")
    parser.add_argument("--prompt-tokens", type=int, default=60)
    parser.add_argument(
        "--prompt-spread",
        type=int,
        default=0,
        help="prompts of --prompt-tokens minus 0 to this many tokens, so the batch is left-padded as GRPO's are",
    )
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument(
        "--eos", action="store_true", help="stop rows on the model's EOS (tokens/s then counts the tokens made)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    backend = args.compile or ("cudagraphs" if args.device.startswith("cuda") else "inductor")
    model = _policy(args.shape, args.device, args.dtype)
    rows = args.prompts * args.n
    params = sum(p.numel() for p in model.parameters())
    print(
        f"{args.shape or 'tiny policy'} ({params / 1e6:.0f} M parameters, {args.dtype}) on {args.device}, "
        f"{args.prompts} prompts x {args.n} = {rows} rows, {args.prompt_tokens} prompt"
        f"{f' (less 0-{args.prompt_spread}: padded)' if args.prompt_spread else ''} + {args.new_tokens} new "
        f"tokens, eager vs {backend}, {args.pairs} alternated pairs",
        flush=True,
    )

    # the compiled side switches its model to packed grouped-query attention: its own copy, so eager stays as shipped
    eos = [int(model.config.eos_token_id)] if args.eos else []
    eager, compiled = _Side(model, "off", rows, eos), _Side(copy.deepcopy(model), backend, rows, eos)
    rng = random.Random(0)
    vocab = model.config.vocab_size
    lengths = [args.prompt_tokens - rng.randrange(0, args.prompt_spread + 1) for _ in range(args.prompts)]
    prompts = [[rng.randrange(3, vocab) for _ in range(length)] for length in lengths]
    prompts = [p for p in prompts for _ in range(args.n)]
    start = time.perf_counter()
    reference = eager.run(prompts, args.new_tokens, args.device)
    print(f"eager warm-up {time.perf_counter() - start:.1f} s", flush=True)
    start = time.perf_counter()
    tokens = compiled.run(prompts, args.new_tokens, args.device)
    print(f"{backend} compile and first batch {time.perf_counter() - start:.1f} s", flush=True)
    same = sum(a == b for a, b in zip(reference, tokens))
    rates: dict[str, list[float]] = {"off": [], backend: []}
    peaks: dict[str, float] = {}
    for _ in range(args.pairs):
        for side in (eager, compiled):
            _reset_peak(args.device)
            start = time.perf_counter()
            made = sum(map(len, side.run(prompts, args.new_tokens, args.device)))
            rates[side.backend].append(made / (time.perf_counter() - start))
            peaks[side.backend] = _peak_gib(args.device)
    ratios = [c / e for e, c in zip(rates["off"], rates[backend])]
    LOOP.run_until_complete(eager.close())
    LOOP.run_until_complete(compiled.close())

    bandwidth = _bandwidth(args.device)
    step_bytes = _step_bytes(model, rows, args.prompt_tokens, args.new_tokens)
    bound = rows * bandwidth / step_bytes
    print(f"tokens equal in {same} of {rows} rows (float rounding may move a draw at a token boundary)")
    if args.eos:
        mean = sum(map(len, reference)) / rows
        print(f"stopping on EOS: responses of {mean:.1f} tokens on average (at most {args.new_tokens}); tokens/s below")
        print("counts the tokens made, while the bound assumes every row decodes every step")
    print(f"memory bandwidth (measured copy): {bandwidth / 1e9:,.0f} GB/s; one step reads {step_bytes / 1e9:.2f} GB")
    print(f"bandwidth bound at {rows} rows: {bound:,.0f} tokens/s")
    for name, values in rates.items():
        med = statistics.median(values)
        peak = f", peak {peaks[name]:.2f} GiB" if name in peaks and peaks[name] else ""
        print(f"{name:<10} median {med:12,.0f} tokens/s ({med / bound:6.1%} of the bound){peak}")
    print(f"{backend}/eager tokens/s: median of pair ratios {statistics.median(ratios):.2f} ({_fmt(ratios)})")
    if args.device.startswith("cuda"):
        print(_largest_batch(model, prompts, args, backend))
    return 0


LOOP = asyncio.new_event_loop()  # every engine's requests and batching task run on this one loop


class _Side:
    """One engine (a decoding backend) on the shared model."""

    def __init__(self, model, backend: str, rows: int, eos: list[int] | None = None):
        from rlrm.inference.hf import HFRolloutEngine

        self.backend, self.eos = backend, eos or []
        self.engine = HFRolloutEngine(model, self.eos, pad_token_id=0, max_batch_size=rows, compile=backend)

    def run(self, prompts, new_tokens: int, device: str) -> list[list[int]]:
        from rlrm.inference.base import SamplingParams

        sampling = [SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=i) for i in range(len(prompts))]

        async def go():
            return await self.engine.generate_many(prompts, sampling)

        done = LOOP.run_until_complete(go())
        sync(device)
        assert all(len(c.token_ids) == new_tokens or c.finish_reason == "stop" for c in done)
        assert self.eos or all(len(c.token_ids) == new_tokens for c in done)
        return [c.token_ids for c in done]

    async def close(self) -> None:
        await self.engine.close()


def _policy(shape: str | None, device: str, dtype: str):
    import torch
    from transformers import AutoModelForCausalLM

    from rlrm.engine.models.tiny import resolve_model_path

    tiny = Path(resolve_model_path("tiny:policy"))
    if shape:
        folder = Path(tempfile.mkdtemp(prefix="decode_speed_"))
        tiny = Path(shaped_policy(shape, tiny, folder))
    return AutoModelForCausalLM.from_pretrained(tiny, dtype=getattr(torch, dtype)).to(device).eval()


def _step_bytes(model, rows: int, prompt: int, new: int) -> float:
    """Bytes one decode step reads: every weight, and the mean KV cache over the response."""
    cfg = model.config
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * next(model.parameters()).element_size()
    return weights + rows * per_token * (prompt + new / 2)


def _bandwidth(device: str) -> float:
    """Bytes/s of a 1 GiB device copy (each byte read once and written once), best of 5."""
    import torch

    src = torch.empty(2**28, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(5):
        sync(device)
        start = time.perf_counter()
        dst.copy_(src)
        sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * src.numel() * src.element_size() / best


def _largest_batch(model, prompts, args, backend: str) -> str:
    """Peak memory of a batch of B and of B/2, extended linearly to the GPU's memory."""
    import torch

    peaks = {}
    for rows in (len(prompts) // 2, len(prompts)):
        side = _Side(model, backend, rows)
        _reset_peak(args.device)
        side.run(prompts[:rows], args.new_tokens, args.device)
        peaks[rows] = _peak_gib(args.device)
        LOOP.run_until_complete(side.close())
    (small, low), (big, high) = sorted(peaks.items())
    per_row = (high - low) / (big - small)
    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    largest = int((0.9 * total - (low - per_row * small)) / per_row) if per_row > 0 else 0
    return (
        f"peak memory ({backend}): {low:.2f} GiB at {small} rows, {high:.2f} GiB at {big}: {per_row * 1024:.1f} MiB a "
        f"row; the largest batch within 90% of {total:.0f} GiB: about {largest} rows (linear estimate)"
    )


def _reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device: str) -> float:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else 0.0


def _fmt(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    sys.exit(main())
