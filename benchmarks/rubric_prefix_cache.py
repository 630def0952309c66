"""What a rubric's shared prefix buys on vLLM: prefix-cache hits and prompt tokens/s, prefix-first vs criterion-first.

A rubric asks the judge K questions about each sample. rlrm writes each request as the sample's filled-in prefix
(question, response, reference) with the criterion last (rlrm/engine/rewards/rubric.py), so the K requests of one
sample share their first tokens and a prefix-caching engine can prefill them once. This script serves the tiny
judge on a real vLLM (CPU: `bash scripts/setup.sh --vllm` first) and sends the same rubric both ways, alternated
in pairs (A B A B ...):

    prefix-first     [sample's prefix][criterion k]      what rlrm sends
    criterion-first  [criterion k][sample's prefix]      the same texts, nothing shared within a sample

Each side sends N samples x K criteria, the K requests of a sample together (as rlrm does) and `--concurrency`
samples at a time. Per side: vLLM's prefix-cache tokens hit / queried (its /metrics, deltas), prompt tokens per
second of wall time, and the pair ratios' median. vLLM on CPU caches whole 128-token KV blocks only: the samples
are multi-step problems whose prefix is longer than one block (the script prints the token counts), and each pair
takes new problems, so that no side hits what an earlier one left in the cache.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rubric_prefix_cache.py --samples 32 --criteria 4 --pairs 3
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import time

PREFIX = (
    "Is the answer to this problem correct?\nProblem: {question}\nAnswer: {response}\nReference answer: {reference}\n"
)
CRITERIA = [
    "Compare the final answer with the reference, then end with 'Score: 10' if it is correct or 'Score: 0' if not.",
    "Check each line of the working, then end with 'Score: 10' if every line is right or 'Score: 0' if not.",
    "Is the final answer written after ####? End with 'Score: 10' if it is or 'Score: 0' if it is not.",
    "Does the answer stay on the problem asked? End with 'Score: 10' if it does or 'Score: 0' if it does not.",
    "Is every number in the working taken from the problem? End with 'Score: 10' or 'Score: 0'.",
    "Is the answer free of repeated lines? End with 'Score: 10' if it is or 'Score: 0' if it is not.",
]


def make_samples(n: int, seed: int = 0) -> list[dict]:
    """Six-step word problems with their worked answers (every third one wrong): a prefix of ~200 tokens."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b, c, d, e, f = (rng.randint(2, 40) for _ in range(6))
        steps = [(f"{a} + {b}", a + b)]
        steps.append((f"{steps[-1][1]} - {c}", steps[-1][1] - c))
        steps.append((f"{steps[-1][1]} + {d}", steps[-1][1] + d))
        steps.append((f"{steps[-1][1]} - {e}", steps[-1][1] - e))
        steps.append((f"{steps[-1][1]} + {f}", steps[-1][1] + f))
        total = steps[-1][1]
        question = (
            f"Max has {a} pens. A friend gives him {b} pens. He loses {c} pens on the way home. "
            f"Then he buys {d} more pens. He gives {e} pens to his sister. His mother gives him {f} pens. "
            "How many pens does Max have now?"
        )
        final = total + (1 if i % 3 == 2 else 0)
        lines = [f"{expr} = {value}" for expr, value in steps[:-1]] + [f"{steps[-1][0]} = {final}"]
        out.append({"question": question, "response": "\n".join(lines) + f"\n#### {final}", "reference": str(total)})
    return out


def messages(sample: dict, criterion: str, layout: str) -> list[dict]:
    prefix = PREFIX.format(**sample)
    text = prefix + criterion if layout == "prefix-first" else criterion + "\n" + prefix
    return [{"role": "user", "content": text}]


async def prefix_counters(session, url: str) -> tuple[float, float]:
    async with session.get(url + "/metrics") as resp:
        text = await resp.text()

    def total(name: str) -> float:
        return sum(float(m) for m in re.findall(rf"^{re.escape(name)}{{[^}}]*}} (\S+)$", text, re.M))

    return total("vllm:prefix_cache_hits_total"), total("vllm:prefix_cache_queries_total")


async def one_side(session, url: str, model: str, samples, criteria, layout: str, concurrency: int) -> dict:
    gate = asyncio.Semaphore(concurrency)
    prompt_tokens = 0

    async def ask(sample, criterion):
        nonlocal prompt_tokens
        body = {"model": model, "messages": messages(sample, criterion, layout), "max_tokens": 8, "temperature": 0}
        async with session.post(url + "/v1/chat/completions", json=body) as resp:
            out = await resp.json()
            resp.raise_for_status()
        prompt_tokens += out["usage"]["prompt_tokens"]

    async def sample_all(sample):
        async with gate:
            await asyncio.gather(*(ask(sample, c) for c in criteria))

    hits0, queries0 = await prefix_counters(session, url)
    start = time.perf_counter()
    await asyncio.gather(*(sample_all(s) for s in samples))
    wall = time.perf_counter() - start
    hits1, queries1 = await prefix_counters(session, url)
    hits, queries = hits1 - hits0, queries1 - queries0
    return {
        "wall_s": wall,
        "prompt_tokens": prompt_tokens,
        "prompt_tok_per_s": prompt_tokens / wall,
        "hit_rate": hits / queries if queries else 0.0,
        "hits": hits,
        "queries": queries,
    }


async def main(args) -> None:
    import aiohttp

    from rlrm.config.reward import RewardServerConfig
    from rlrm.engine.models.tiny import resolve_model_path
    from rlrm.launch.common.roles import Role
    from rlrm.launch.fleet.server_fleet import ServerFleet

    cfg = RewardServerConfig(backend="vllm", model="tiny:judge", router="client")
    path = resolve_model_path(cfg.model)
    samples = make_samples(args.samples)
    criteria = CRITERIA[: args.criteria]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    lengths = [
        len(
            tok.apply_chat_template(
                messages(s, criteria[0], "prefix-first"), add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
        for s in samples
    ]
    shared = [
        len(
            tok.apply_chat_template([{"role": "user", "content": PREFIX.format(**s)}], tokenize=True, return_dict=False)
        )
        for s in samples
    ]
    print(f"prompt tokens per request: {min(lengths)}-{max(lengths)}; the shared prefix: {min(shared)}-{max(shared)}")
    fleet = ServerFleet(cfg.fleet_spec(), role=Role.GENRM, model_path=path)
    started = time.perf_counter()
    await fleet.start()
    print(f"vLLM judge ready in {time.perf_counter() - started:.0f} s at {fleet.urls[0]}")
    url, model = fleet.urls[0].rstrip("/"), cfg.request_model or path
    rows = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            warm = make_samples(4, seed=10_000)
            await one_side(session, url, model, warm, criteria, "prefix-first", args.concurrency)
            for pair in range(args.pairs):
                # new problems each pair: nothing an earlier side left in the cache can be hit (the two layouts'
                # texts of one problem share no block, so both sides of a pair take the same problems)
                fresh = make_samples(args.samples, seed=pair + 1)
                for layout in ("prefix-first", "criterion-first"):
                    row = await one_side(session, url, model, fresh, criteria, layout, args.concurrency)
                    rows.append((pair, layout, row))
                    print(
                        f"pair {pair} {layout:15s} wall {row['wall_s']:6.2f} s  prompt tok/s {row['prompt_tok_per_s']:8.0f}  "
                        f"prefix-cache hits {row['hits']:.0f}/{row['queries']:.0f} ({row['hit_rate']:.3f})"
                    )
    finally:
        await fleet.close()
    ratios = []
    for pair in range(args.pairs):
        a = next(r for p, lay, r in rows if p == pair and lay == "prefix-first")
        b = next(r for p, lay, r in rows if p == pair and lay == "criterion-first")
        ratios.append(a["prompt_tok_per_s"] / b["prompt_tok_per_s"])
    hit = {
        lay: statistics.median(r["hit_rate"] for _, l2, r in rows if l2 == lay)
        for lay in ("prefix-first", "criterion-first")
    }
    print(
        f"{args.samples} samples x {len(criteria)} criteria, {args.pairs} pairs: prefix-cache hit rate "
        f"prefix-first {hit['prefix-first']:.3f}, criterion-first {hit['criterion-first']:.3f}; prompt tok/s "
        f"prefix-first / criterion-first: pairs {[round(x, 3) for x in ratios]}, median {statistics.median(ratios):.3f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--criteria", type=int, default=4, choices=range(1, len(CRITERIA) + 1))
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8, help="samples in flight at once")
    asyncio.run(main(parser.parse_args()))
