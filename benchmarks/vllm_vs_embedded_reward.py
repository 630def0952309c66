"""rlrm's embedded server vs the real vLLM as reward servers, on the same tiny models with the same clients.

    .venv/bin/python benchmarks/vllm_vs_embedded_reward.py [--pairs 5] [--threads 1] [--judge tiny:judge] [--disrm tiny:disrm]

Starts four servers through rlrm's fleet code (ServerPool, the argv a profile's `reward.server.backend` gives):
the tiny DisRM and the tiny judge, each on `embedded` and on `vllm`. Then, in alternated A B A B pairs
(A: embedded, B: vLLM; one warm-up round each first):
  - /classify samples/s with 256 concurrent clients, one 20-80-token input each (the DisRM client's shape);
  - judge /v1/chat/completions completion tokens/s with 64 concurrent clients (the tiny-genrm prompt shape,
    32 tokens at most, temperature 0).
Prints each pair and the median of the pair ratios vLLM / embedded (> 1: vLLM faster). Both engines get
`--threads` CPU threads (vLLM on CPU serves with one torch thread unless OMP_NUM_THREADS says otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time


def main() -> None:
    import os

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--classify-clients", type=int, default=256)
    parser.add_argument("--chat-clients", type=int, default=64)
    parser.add_argument("--judge", default="tiny:judge", help="Judge model (speed does not depend on its training).")
    parser.add_argument("--disrm", default="tiny:disrm", help="DisRM model (folder or tiny:NAME).")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))  # vLLM's torch threads (the embedded: --threads)
    from rlrm.engine.models.tiny import resolve_model_path
    from rlrm.launch.fleet.backends import ReplicaLaunch
    from rlrm.launch.fleet.pool import ServerPool
    from rlrm.launch.fleet.spec import FleetSpec

    disrm, judge = resolve_model_path(args.disrm), resolve_model_path(args.judge)
    pools = {
        (kind, backend): ServerPool(
            ReplicaLaunch.of(
                FleetSpec(backend=backend, threads=args.threads, max_batch=256), kind, path, served_model_name=name
            )
        )
        for kind, path, name in (("disrm", disrm, "tiny:disrm"), ("genrm", judge, "tiny:judge"))
        for backend in ("embedded", "vllm")
    }
    try:
        t0 = time.monotonic()
        for pool in pools.values():
            for server in pool.servers:
                server.launch()
        for (kind, backend), pool in pools.items():
            pool.start_timeout_s = 900
            for server in pool.servers:
                server.start_timeout_s = 900
                server.wait_ready()
            print(f"{backend} {kind} healthy ({time.monotonic() - t0:.0f} s since launch)", flush=True)
        inputs = _classify_inputs(args.classify_clients)
        messages = _chat_messages(args.chat_clients)
        cases = {
            "classify samples/s @%d" % args.classify_clients: lambda url: _classify(url, inputs),
            "judge tokens/s @%d" % args.chat_clients: lambda url: _chat(url, messages),
        }
        for (name, run), kind in zip(cases.items(), ("disrm", "genrm")):
            a, b = pools[(kind, "embedded")].urls[0], pools[(kind, "vllm")].urls[0]
            asyncio.run(run(a)), asyncio.run(run(b))  # warm-up
            ratios = []
            for i in range(args.pairs):
                ra, rb = asyncio.run(run(a)), asyncio.run(run(b))
                ratios.append(rb / ra)
                print(f"{name} pair {i}: embedded {ra:.1f}, vllm {rb:.1f}, vllm/embedded {rb / ra:.2f}", flush=True)
            print(f"{name}: median vllm/embedded ratio {statistics.median(ratios):.2f} over {args.pairs} pairs")
    finally:
        for pool in pools.values():
            pool.stop()


def _classify_inputs(n: int) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(3, 400) for _ in range(rng.randrange(20, 81))] for _ in range(n)]


def _chat_messages(n: int) -> list[list[dict]]:
    rng = random.Random(1)
    out = []
    for _ in range(n):
        a, b = rng.randrange(1, 50), rng.randrange(1, 50)
        answer = a + b + rng.choice([0, 0, 1])
        text = (
            f"Is the answer to this problem correct?\nProblem: What is {a} plus {b}?\nAnswer: #### {answer}\n"
            f"Reference answer: {a + b}\nCompare the final answer with the reference, then end with 'Score: 10' "
            "if it is correct or 'Score: 0' if it is not."
        )
        out.append([{"role": "user", "content": text}])
    return out


async def _classify(url: str, inputs: list[list[int]]) -> float:
    """samples/s of one round: every input its own concurrent request."""
    import httpx

    limits = httpx.Limits(max_connections=len(inputs))
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

        async def one(ids):
            r = await client.post(
                url + "/classify", json={"model": "tiny:disrm", "input": ids, "use_activation": False}
            )
            r.raise_for_status()

        t = time.perf_counter()
        await asyncio.gather(*(one(ids) for ids in inputs))
        return len(inputs) / (time.perf_counter() - t)


async def _chat(url: str, messages: list[list[dict]]) -> float:
    """completion tokens/s of one round."""
    import httpx

    limits = httpx.Limits(max_connections=len(messages))
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

        async def one(m) -> int:
            body = {"model": "tiny:judge", "messages": m, "max_tokens": 32, "temperature": 0}
            r = await client.post(url + "/v1/chat/completions", json=body)
            r.raise_for_status()
            return r.json()["usage"]["completion_tokens"]

        t = time.perf_counter()
        tokens = await asyncio.gather(*(one(m) for m in messages))
        return sum(tokens) / (time.perf_counter() - t)


if __name__ == "__main__":
    main()
