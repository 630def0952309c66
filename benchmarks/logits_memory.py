"""Peak memory and time of one actor micro-batch, forward and backward, with the LM head whole or in chunks.

    python benchmarks/logits_memory.py [--rows 16] [--response 256] [--chunks 0,2048,512] [--pairs 3]
    python benchmarks/logits_memory.py --device cuda --dtype bfloat16 --shape qwen2.5-0.5b --rows 16 --response 512
    python benchmarks/logits_memory.py --fsdp [...]   # the model sharded as an actor rank shards it (world size 1)

A random Qwen2 with Qwen2.5's vocabulary (151,936 tokens; `--hidden`, `--layers` small by default, so the
logits dominate as they do at 0.5B; `--shape qwen2.5-0.5b` for that model's own shape, 494 M parameters),
a micro-batch of `--rows` samples in groups of 8 sharing a prompt,
`--response` tokens each: `rlrm.engine.actor.logprobs.response_log_probs` with gradients, then a backward pass
through a loss of the log-probs and entropy, as the actor's update runs it (`actor.logits_chunk_tokens`;
as there, a micro-batch whose float32 logits stay under 256 MiB runs the head whole whatever the setting).
With `--fsdp` the model is FSDP2-sharded as `actor.strategy: fsdp2` shards it on one rank (a process group of
one: gloo on the CPU, nccl on CUDA; under `--dtype bfloat16` on CUDA, FSDP2's bf16 mixed precision in place of
autocast, as the ranks run).

Each setting runs in its own process (peak memory is a process's high-water mark): on the CPU, the rise of the
resident set over the process's size before the pass (ru_maxrss); on CUDA, torch.cuda.max_memory_allocated
over the allocated memory before it. Time: the median of `--repeats` passes after one warm-up, the settings
alternated pair by pair (`--pairs`); printed: each chunk setting against the whole head, the median of the pair
ratios. One torch thread unless `--threads`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QWEN_VOCAB = 151_936


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=16, help="samples in the micro-batch (groups of 8)")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens")
    parser.add_argument("--response", type=int, default=256, help="response tokens")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--shape", help="a named shape instead of --hidden/--layers (qwen2.5-0.5b), at --vocab")
    parser.add_argument("--vocab", type=int, default=QWEN_VOCAB)
    parser.add_argument("--chunks", default="0,2048,512", help="logits_chunk_tokens settings; 0 (whole) first")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2, help="timed passes per process")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", help="autocast dtype on the device (float32: none)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--fsdp", action="store_true", help="shard the model as an actor rank does (world size 1)")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args, args.worker)))
        return
    chunks = [int(c) for c in args.chunks.split(",")]
    if chunks[0] != 0:
        chunks.insert(0, 0)
    logit_gb = args.rows * args.response * args.vocab * 4 / 1e9
    model = f"shape {args.shape}" if args.shape else f"hidden {args.hidden}, {args.layers} layers"
    model += ", FSDP2 (one rank)" if args.fsdp else ""
    print(
        f"{args.rows} rows x ({args.prompt} + {args.response}) tokens, vocab {args.vocab:,}, {model}, "
        f"{args.device}, {args.dtype}: float32 logits of the micro-batch {logit_gb:.2f} GB",
        flush=True,
    )
    runs: dict[int, list[dict]] = {c: [] for c in chunks}
    for pair in range(args.pairs):
        for chunk in chunks:  # whole first, then each chunk setting: A B C A B C ...
            cmd = [sys.executable, __file__, "--worker", str(chunk)] + _forwarded(args)
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=True)
            runs[chunk].append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"pair {pair + 1}: " + ", ".join(f"{c}: {runs[c][-1]['seconds']:.2f} s" for c in chunks), flush=True)
    report(chunks, runs)


def report(chunks: list[int], runs: dict[int, list[dict]]) -> None:
    """The table: each setting's median peak and time, its time against the whole head's (median of pair ratios)
    and the largest log-prob difference from it; a setting that ran out of memory says so."""
    whole = runs[0]
    print(f"{'chunk':>8} {'peak GB':>9} {'s/pass':>8} {'time vs whole':>14} {'max |dlogp|':>12}")
    for chunk in chunks:
        if any(r.get("oom") for r in runs[chunk]):
            print(f"{chunk or 'whole':>8} out of memory")
            continue
        peak = statistics.median(r["peak_gb"] for r in runs[chunk])
        seconds = statistics.median(r["seconds"] for r in runs[chunk])
        if any(w.get("oom") for w in whole):
            print(f"{chunk or 'whole':>8} {peak:9.2f} {seconds:8.2f} {'(whole: OOM)':>14}")
            continue
        ratios = [r["seconds"] / w["seconds"] for r, w in zip(runs[chunk], whole)]
        diff = max(abs(a - b) for a, b in zip(runs[chunk][0]["log_probs"], whole[0]["log_probs"]))
        print(f"{chunk or 'whole':>8} {peak:9.2f} {seconds:8.2f} {statistics.median(ratios):13.2f}x {diff:12.2e}")


def _forwarded(args) -> list[str]:
    names = ("rows", "prompt", "response", "hidden", "layers", "vocab", "repeats", "device", "dtype", "threads")
    shape = ["--shape", args.shape] if args.shape else []
    fsdp = ["--fsdp"] if args.fsdp else []
    return [item for name in names for item in (f"--{name}", str(getattr(args, name)))] + shape + fsdp


def worker(args, chunk: int) -> dict:
    import contextlib
    import resource
    import time

    import torch
    from _common import random_qwen2, shaped_qwen2

    from rlrm.engine.actor.batch import collate
    from rlrm.engine.actor.logprobs import response_log_probs
    from rlrm.inference.base import Completion

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    model = shaped_qwen2(args.shape, args.vocab) if args.shape else random_qwen2(args.vocab, args.hidden, args.layers)
    model = model.to(device).train()
    if args.fsdp:
        model = _sharded(model, device, args.dtype)
    generator = torch.Generator().manual_seed(0)
    completions = []
    for row in range(args.rows):
        prompt = torch.randint(1, args.vocab, (args.prompt,), generator=torch.Generator().manual_seed(row // 8))
        response = torch.randint(1, args.vocab, (args.response,), generator=generator)
        completions.append(Completion(prompt.tolist(), response.tolist(), [0.0] * args.response, "length"))
    batch = collate(completions, pad_token_id=0).to(device)
    autocast = (
        contextlib.nullcontext()
        if args.dtype == "float32" or (args.fsdp and device.type == "cuda")  # the ranks' mixed precision instead
        else torch.autocast(device.type, dtype=getattr(torch, args.dtype))
    )

    def one_pass():
        with autocast:
            lp, ent = response_log_probs(model, batch, 1.0, args.rows, with_entropy=True, chunk_tokens=chunk)
        ((lp + 0.01 * ent) * batch.response_mask).sum().backward()
        model.zero_grad(set_to_none=True)
        return lp.detach()

    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss_bytes()
    try:
        log_probs = one_pass()
    except torch.OutOfMemoryError:  # what the chunks are for: say so instead of failing the comparison
        return {"peak_gb": float("nan"), "seconds": float("nan"), "log_probs": [], "oom": True}
    if cuda:
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        one_pass()
        if cuda:
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return {"peak_gb": peak / 1e9, "seconds": statistics.median(seconds), "log_probs": log_probs[0, :64].tolist()}


def _sharded(model, device, dtype: str):
    """`model` FSDP2-sharded as `rlrm.engine.actor.rank.shard_model` shards an actor rank's, on a world of one."""
    import tempfile

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from rlrm.engine.actor.rank import shard_model

    store = dist.FileStore(str(Path(tempfile.mkdtemp(prefix="logits_memory_")) / "store"), 1)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=store, rank=0, world_size=1)
    shard_model(model, init_device_mesh(device.type, (1,)), device.type, dtype)
    return model


def _rss_bytes() -> int:
    import os

    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


if __name__ == "__main__":
    main()
