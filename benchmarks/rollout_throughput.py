"""hf rollout engine vs one `model.generate` call: tokens/s on the same prompts and lengths.

    .venv/bin/python benchmarks/rollout_throughput.py [--model PATH] [--requests 64] [--new-tokens 64] [--threads 2]

Both sides generate exactly `--new-tokens` tokens per prompt (no EOS can stop them early), with
sampling at temperature 1. The engine gets the prompts as concurrent per-request calls and batches
them itself; `model.generate` gets them as one left-padded batch. Each side runs once to warm up,
then `--repeats` times; the best run of each is compared (the machine is shared and noisy).
Default model: a random tiny Qwen2 of the size the tiny profiles use.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time


def main() -> None:
    import torch

    from rlrm.engine.rollout.base import SamplingParams
    from rlrm.engine.rollout.hf import HFRolloutEngine

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="HF folder (default: random tiny Qwen2)")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = _load(args.model)
    vocab = model.config.vocab_size
    rng = random.Random(0)
    prompts = [[rng.randrange(3, vocab) for _ in range(rng.randint(20, 40))] for _ in range(args.requests)]
    total_new = args.requests * args.new_tokens

    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = (ids != 0).long()
    for i, p in enumerate(prompts):
        mask[i, width - len(p) :] = 1

    def hf_generate():
        with torch.inference_mode():
            model.generate(
                input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, pad_token_id=0,
            )

    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=0, max_batch_size=args.requests, batch_wait_ms=5)

    async def engine_round():
        sampling = [SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens, seed=i) for i in range(len(prompts))]
        await engine.generate_many(prompts, sampling)

    async def engine_runs():
        times = []
        for _ in range(args.repeats + 1):
            start = time.perf_counter()
            await engine_round()
            times.append(time.perf_counter() - start)
        await engine.close()
        return times[1:]

    hf_times = []
    for _ in range(args.repeats + 1):
        start = time.perf_counter()
        hf_generate()
        hf_times.append(time.perf_counter() - start)
    hf_best = min(hf_times[1:])
    engine_best = min(asyncio.run(engine_runs()))
    hf_tps, engine_tps = total_new / hf_best, total_new / engine_best
    print(f"{args.requests} requests x {args.new_tokens} new tokens, {args.threads} threads, best of {args.repeats}")
    print(f"model.generate (one batch)        {hf_tps:10,.0f} tokens/s")
    print(f"engine.generate (concurrent)      {engine_tps:10,.0f} tokens/s")
    print(f"ratio engine / model.generate     {engine_tps / hf_tps:10.2f}")


def _load(path):
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if path:
        return AutoModelForCausalLM.from_pretrained(path).eval()
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=512, hidden_size=128, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    )
    return Qwen2ForCausalLM(config).eval()


if __name__ == "__main__":
    main()
