"""GenRM through `/v1/chat/completions` under concurrent clients vs one batched `generate`, in tokens/s.

    .venv/bin/python benchmarks/genrm_throughput.py [--model PATH] [--clients 64] [--max-tokens 32] [--threads 2] [--rounds 7]

Starts an embedded judge server (its own process) and sends `--clients` concurrent chat requests
(greedy, `--max-tokens` each), counting completion tokens from `usage`; then runs one batched HF
`generate` in this process on the same rendered prompts with the same greedy settings. A round
takes about a tenth of a second on the tiny models, so each side runs `--rounds` times after a
warm-up and the medians are compared. Default
model: the tiny policy (`tiny:policy`), which stands in for a judge of its size; pass
`--model tiny:judge` or any causal-LM folder to see how the ratio moves with the model's size.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlrm.config.schema import PROMPT_SUFFIX, SyntheticConfig
    from rlrm.engine.data.synthetic import synthetic_splits
    from rlrm.engine.models.tiny import resolve_model_path
    from rlrm.launch.common.ports import free_port
    from rlrm.launch.fleet.process import ServerProcess, embedded_server_argv

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny:policy")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    path = resolve_model_path(args.model)
    _, test = synthetic_splits(SyntheticConfig(num_train=1, num_test=args.clients, seed=7), PROMPT_SUFFIX)
    messages = [ex.prompt for ex in test]
    argv = embedded_server_argv(
        path, "genrm", free_port(), extra=["--threads", str(args.threads), "--max-batch", str(args.clients)]
    )
    with ServerProcess(argv) as server:
        rounds = asyncio.run(_rounds(server.url, messages, args.max_tokens, args.rounds))
    served_s = statistics.median(s for s, _ in rounds)
    served_tokens = rounds[0][1]
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    prompts = [
        tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True, return_dict=False) for m in messages
    ]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + list(p) for p in prompts])
    mask = (ids != tok.pad_token_id).long()
    for i, p in enumerate(prompts):
        mask[i, width - len(p) :] = 1
    times = []
    for _ in range(1 + args.rounds):  # the first is a warm-up
        start = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=args.max_tokens,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        times.append(time.perf_counter() - start)
    batched_s = statistics.median(times[1:])
    new = out[:, width:]
    batched_tokens = int(sum(_length(row.tolist(), tok.eos_token_id, tok.pad_token_id) for row in new))
    print(
        f"{args.clients} judge requests, greedy, max {args.max_tokens} tokens, {args.threads} threads, "
        f"median of {args.rounds} rounds"
    )
    print(f"one batched generate (in process)   {batched_tokens / batched_s:10,.0f} tokens/s ({batched_tokens} tokens)")
    print(
        f"{args.clients} concurrent chat clients      {served_tokens / served_s:10,.0f} tokens/s ({served_tokens} tokens)"
    )
    print(f"served / batched                    {(served_tokens / served_s) / (batched_tokens / batched_s):10.2f}")


def _length(row: list[int], eos: int, pad: int) -> int:
    """Generated tokens up to and including EOS (generate pads finished rows afterwards)."""
    return row.index(eos) + 1 if eos in row else len(row)


async def _rounds(url: str, messages: list, max_tokens: int, rounds: int) -> list[tuple[float, int]]:
    """(seconds, completion tokens) of each round of concurrent requests, after one warm-up round."""
    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:

        async def one(m) -> int:
            body = {"model": "judge", "messages": m, "max_tokens": max_tokens, "temperature": 0}
            async with client.post(url + "/v1/chat/completions", json=body) as resp:
                resp.raise_for_status()
                return (await resp.json())["usage"]["completion_tokens"]

        timed = []
        for _ in range(1 + rounds):
            start = time.perf_counter()
            tokens = sum(await asyncio.gather(*(one(m) for m in messages)))
            timed.append((time.perf_counter() - start, tokens))
        return timed[1:]


if __name__ == "__main__":
    main()
