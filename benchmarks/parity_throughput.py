"""Throughput of the two DisRM scorers of `rlrm parity disrm` on the same inputs, and the cost of
the legacy scorer's FSDP2 machinery against a plain batched forward.

    python benchmarks/parity_throughput.py                          # tiny DisRM-sized random model
    python benchmarks/parity_throughput.py --model PATH --samples 64 --n 8 --threads 2

Inputs: `--samples` prompts x `--n` responses of the tiny policy (profile tiny-rule), rendered and
truncated once, then scored by
  plain        AutoModelForSequenceClassification, fp32, the same micro-batches, right-padded, no_grad
  legacy-fp32  the legacy FSDP2 scorer, world size 1 (in this process), fp32
  legacy-bf16  the same in bf16 (its rank in a spawned process: one process group per process)
  loop-fp32    the reward loop: an embedded server over /classify, fp32
Each is timed `--repeats` times after a warm-up pass, the contenders interleaved, and the best time
is kept (the machine is shared; the best is the least disturbed run). The check: legacy-fp32
within 1.2x of plain.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _common import padded_forward, random_qwen2


def build_model(dest: Path, tokenizer_path: str, hidden: int, layers: int) -> str:
    """A random Qwen2 DisRM of the given size with the tiny tokenizer (scores are not the point here)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_path)
    model = random_qwen2(
        len(tok),
        hidden,
        layers,
        num_labels=1,
        heads=max(1, hidden // 32),
        kv_heads=max(1, hidden // 64),
        pad_token_id=tok.pad_token_id,
    )
    model.save_pretrained(dest)
    tok.save_pretrained(dest)
    return str(dest)


def plain_forward(model, ids: list[list[int]], micro_batch: int, pad_id: int) -> list[float]:
    import torch

    out = []
    with torch.no_grad():
        for start in range(0, len(ids), micro_batch):
            out += padded_forward(model, ids[start : start + micro_batch], pad_id)[:, 0].tolist()
    return out


def best_times(fns: dict, repeats: int) -> dict[str, float]:
    """The best time of each function, the runs interleaved (A B A B ...) so that a burst of load
    from other processes on a shared machine hits every contender alike."""
    for fn in fns.values():
        fn()  # warm-up
    best = {name: float("inf") for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="reward model folder (default: a random Qwen2 DisRM, see --hidden/--layers)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--samples", type=int, default=32, help="prompts")
    parser.add_argument("--n", type=int, default=8, help="responses per prompt")
    parser.add_argument("--micro-batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-loop", action="store_true", help="do not start a reward server")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForSequenceClassification

    from rlrm.config.loader import load_profile
    from rlrm.config.reward import RewardConfig
    from rlrm.engine.models.tiny import resolve_model_path
    from rlrm.engine.rewards.fsdp_disrm.config import LegacyConfig
    from rlrm.engine.rewards.fsdp_disrm.workers import LegacyWorkerGroup
    from rlrm.parity.inputs import encode_samples, generate_samples
    from rlrm.parity.loop import loop_reward_config, score_with_loop
    from rlrm.parity.run import load_rm_tokenizer

    torch.set_num_threads(args.threads)
    policy = resolve_model_path("tiny:policy")
    tmp = tempfile.TemporaryDirectory()
    model_path = args.model or build_model(Path(tmp.name) / "disrm", policy, args.hidden, args.layers)
    samples = generate_samples(load_profile("tiny-rule"), args.samples, args.n, seed=0)
    tok = load_rm_tokenizer(model_path)
    enc = encode_samples(tok, samples, max_length=512)
    n = len(enc.ids)
    params = sum(p.numel() for p in AutoModelForSequenceClassification.from_pretrained(model_path).parameters())
    print(
        f"{n} samples, {sum(map(len, enc.ids))} tokens, model {params / 1e6:.2f} M params, "
        f"micro-batch {args.micro_batch_size}, {args.threads} thread(s)"
    )

    plain = AutoModelForSequenceClassification.from_pretrained(model_path).eval()
    fns = {"plain": lambda: plain_forward(plain, enc.ids, args.micro_batch_size, tok.pad_token_id)}
    groups = []
    try:
        for dtype in ("fp32", "bf16"):
            cfg = LegacyConfig(
                model_path,
                dtype=dtype,
                micro_batch_size=args.micro_batch_size,
                pad_token_id=tok.pad_token_id,
                threads=args.threads,
            )
            groups.append(LegacyWorkerGroup(cfg, spawn=dtype != "fp32"))  # one in-process rank at a time
            groups[-1].start()
            fns[f"legacy-{dtype}"] = lambda g=groups[-1]: g.score(enc.ids, enc.response_tokens)
        results = best_times(fns, args.repeats)
    finally:
        for group in groups:
            group.close()
    if not args.skip_loop:
        reward = loop_reward_config(RewardConfig(), model_path, "fp32", 512)
        reward.server.threads = args.threads
        reward.server.max_batch = args.micro_batch_size
        results["loop-fp32"] = score_with_loop(samples, reward, repeats=args.repeats).seconds

    for name, seconds in results.items():
        print(f"{name:12s} {n / seconds:10.1f} samples/s   ({seconds * 1000:.1f} ms)")
    ratio = results["legacy-fp32"] / results["plain"]
    print(f"legacy-fp32 / plain time: {ratio:.3f}x ({'within' if ratio <= 1.2 else 'OVER'} the 1.2x budget)")
    print(json.dumps({k: n / v for k, v in results.items()} | {"legacy_fp32_over_plain": ratio}))
    tmp.cleanup()


if __name__ == "__main__":
    main()
