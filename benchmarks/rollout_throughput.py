"""hf rollout engine vs one `model.generate` call: tokens/s on the same prompts and lengths.

    .venv/bin/python benchmarks/rollout_throughput.py [--model PATH] [--requests 64] [--new-tokens 64]
        [--threads 2] [--repeats 5] [--device cpu|cuda]

Both sides generate exactly `--new-tokens` tokens per prompt (no EOS can stop them early), sampling
at temperature 1 with no top-k/top-p. `model.generate` gets the prompts (random lengths 20-40) as
one left-padded batch; the engine gets them as concurrent `engine.generate` calls and batches them
itself. Each side runs once to warm up, then the two alternate `--repeats` times, so load from
other processes hits both alike; the ratio of the median rates is the figure to quote (target:
>= 0.9). Default model: a random tiny Qwen2 of the size the tiny profiles use.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

from _common import random_qwen2, sync


def main() -> None:
    import torch

    from rlrm.inference.base import SamplingParams
    from rlrm.inference.hf import HFRolloutEngine

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="HF model folder (default: random tiny Qwen2)")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (CPU)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds per side, alternating")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = _load(args.model).to(args.device)
    rng = random.Random(0)
    vocab = model.config.vocab_size
    prompts = [[rng.randrange(3, vocab) for _ in range(rng.randint(20, 40))] for _ in range(args.requests)]
    new_tokens = args.new_tokens
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts], device=args.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=args.device)

    def hf_generate() -> None:
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                pad_token_id=0,
            )
        assert out.shape[1] == width + new_tokens

    # No EOS ids: every request runs to max_new_tokens, as min_new_tokens forces model.generate to.
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=0, max_batch_size=args.requests)
    sampling = [SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=i) for i in range(len(prompts))]

    async def engine_round() -> None:
        done = await asyncio.gather(*(engine.generate(p, s) for p, s in zip(prompts, sampling)))
        assert all(len(c.token_ids) == new_tokens for c in done)

    def timed(fn) -> float:
        sync(args.device)
        start = time.perf_counter()
        fn()
        sync(args.device)
        return args.requests * new_tokens / (time.perf_counter() - start)

    async def rounds() -> tuple[list[float], list[float]]:
        loop = asyncio.get_running_loop()
        hf_generate()
        await engine_round()  # warm-ups
        hf_rates, engine_rates = [], []
        for _ in range(args.repeats):
            hf_rates.append(timed(hf_generate))
            sync(args.device)
            start = loop.time()
            await engine_round()
            sync(args.device)
            engine_rates.append(args.requests * new_tokens / (loop.time() - start))
        await engine.close()
        return hf_rates, engine_rates

    hf_rates, engine_rates = asyncio.run(rounds())
    hf_med, engine_med = statistics.median(hf_rates), statistics.median(engine_rates)
    print(
        f"{args.requests} requests x {new_tokens} new tokens, device {args.device}, {args.threads} threads, "
        f"{args.repeats} alternating rounds, {engine.batches_run} engine batches"
    )
    print(f"model.generate (one batch)     median {hf_med:10,.0f} tokens/s   best {max(hf_rates):10,.0f}")
    print(f"engine.generate (concurrent)   median {engine_med:10,.0f} tokens/s   best {max(engine_rates):10,.0f}")
    print(
        f"ratio engine / model.generate  median {engine_med / hf_med:10.2f}          "
        f"best {max(engine_rates) / max(hf_rates):10.2f}"
    )


def _load(path: str | None):
    from transformers import AutoModelForCausalLM

    if path:
        return AutoModelForCausalLM.from_pretrained(path).eval()
    return random_qwen2(512, 128, 2)


if __name__ == "__main__":
    main()
