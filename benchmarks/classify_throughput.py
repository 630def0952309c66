"""Embedded `/classify` throughput: 256 concurrent clients vs one batched forward vs one at a time.

    .venv/bin/python benchmarks/classify_throughput.py [--model PATH | --hidden 128 --layers 2] [--requests 256] [--threads 2] [--rounds 7]

Starts an embedded DisRM server (its own process, `--threads` torch threads) and measures, on the
same inputs, in samples/s: (a) one batched forward in this process (the ceiling), (b) `--requests`
concurrent HTTP clients, one input each, (c) the same requests sent one at a time, (d) one input
per forward in this process (a / d is all that batching can buy on this hardware). Prints the
ratios (b)/(a) and (b)/(c) and the p50/p99 request latency of (b). (a) and (b) run `--rounds`
times after a warm-up and their medians are compared; the clients keep their connections across
rounds, as the reward loop's clients do. Default model: a randomly
initialised Qwen2 sequence classifier of the tiny policy's size (the speed does not depend on
what it learned); `--hidden`/`--layers` make it bigger, to see how the fixed per-request HTTP
cost weighs against the forward as the model grows.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

from _common import padded_forward, random_qwen2


def main() -> None:
    import httpx
    import torch

    from rlrm.launch.common.ports import free_port
    from rlrm.launch.fleet.process import ServerProcess, embedded_server_argv

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--hidden", type=int, default=128, help="Hidden size of the random DisRM (without --model).")
    parser.add_argument("--layers", type=int, default=2, help="Layers of the random DisRM (without --model).")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.model) if args.model else _random_disrm(Path(tmp), args.hidden, args.layers)
        model, inputs = _inputs(path, args.requests)
        times = []
        for _ in range(1 + args.rounds):  # the first is a warm-up
            start = time.perf_counter()
            with torch.inference_mode():  # as the server scores
                padded_forward(model, inputs, 0)
            times.append(time.perf_counter() - start)
        batched_s = statistics.median(times[1:])
        start = time.perf_counter()
        for ids in inputs:  # what batching is worth on this hardware, before any HTTP
            with torch.inference_mode():
                padded_forward(model, [ids], 0)
        single_s = time.perf_counter() - start
        argv = embedded_server_argv(
            str(path), "disrm", free_port(), extra=["--threads", str(args.threads), "--max-batch", str(args.max_batch)]
        )
        with ServerProcess(argv) as server:
            url = server.url + "/classify"
            rounds = asyncio.run(_concurrent(url, inputs, args.rounds))
            concurrent_s, latencies = sorted(rounds)[len(rounds) // 2]  # the median round
            with httpx.Client() as client:
                start = time.perf_counter()
                for ids in inputs:
                    client.post(url, json={"input": ids, "use_activation": False}).raise_for_status()
                sequential_s = time.perf_counter() - start
    n = len(inputs)
    params = sum(p.numel() for p in model.parameters())
    print(
        f"{n} inputs, {params / 1e6:.1f} M-parameter DisRM, {args.threads} threads (server and in-process forward), "
        f"median of {args.rounds} rounds"
    )
    print(f"one batched forward (in process)   {n / batched_s:10,.0f} samples/s")
    print(
        f"{n} concurrent clients over HTTP   {n / concurrent_s:10,.0f} samples/s   p50 {_ms(latencies, 0.5)} ms  p99 {_ms(latencies, 0.99)} ms"
    )
    print(f"one request at a time over HTTP    {n / sequential_s:10,.0f} samples/s")
    print(
        f"one input per forward (in process) {n / single_s:10,.0f} samples/s   (batching gain here: {single_s / batched_s:.1f}x)"
    )
    print(f"concurrent / batched forward       {batched_s / concurrent_s:10.2f}")
    print(f"concurrent / one at a time         {sequential_s / concurrent_s:10.2f}")


async def _concurrent(url: str, inputs: list[list[int]], rounds: int) -> list[tuple[float, list[float]]]:
    """(seconds, request latencies) of each round of concurrent requests, after one warm-up round."""
    import aiohttp  # httpx's async pool is the bottleneck at this concurrency (see rlrm/launch/client/balancer.py)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:

        async def one(ids) -> float:
            t = time.perf_counter()
            async with client.post(url, json={"input": ids, "use_activation": False}) as resp:
                resp.raise_for_status()
                await resp.read()
            return time.perf_counter() - t

        timed = []
        for _ in range(1 + rounds):
            start = time.perf_counter()
            latencies = await asyncio.gather(*(one(ids) for ids in inputs))
            timed.append((time.perf_counter() - start, list(latencies)))
        return timed[1:]


def _inputs(path: Path, count: int):
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    rng = random.Random(0)
    vocab = model.config.vocab_size
    return model, [[rng.randrange(3, vocab) for _ in range(rng.randint(50, 80))] for _ in range(count)]


def _random_disrm(folder: Path, hidden: int = 128, layers: int = 2) -> Path:
    random_qwen2(512, hidden, layers, num_labels=1, pad_token_id=0).save_pretrained(folder / "disrm")
    return folder / "disrm"


def _ms(values, q):
    values = sorted(values)
    return f"{1000 * values[min(len(values) - 1, int(q * len(values)))]:.0f}"


if __name__ == "__main__":
    main()
