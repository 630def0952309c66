"""How long the tiny models take to get: a build from the recipe, and first use with the shipped files.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/models_build.py                         # builds + first use
    PYTHONPATH=$PWD .venv/bin/python benchmarks/models_build.py --baseline ../rlrm-old  # and another checkout's
    PYTHONPATH=$PWD .venv/bin/python benchmarks/models_build.py --first-use-only        # seconds
    PYTHONPATH=$PWD .venv/bin/python benchmarks/models_build.py --step-parts 30         # where a judge step goes

Each build is `rlrm models prepare --name NAME --force` in its own subprocess with a fresh cache folder
(policy first: the others start from it). With `--baseline DIR` the same command runs from that checkout
(PYTHONPATH=DIR), alternating with this one model by model, so both meet the same machine load; compare the
ratio, not the seconds. Printed per model: wall seconds of the command, the build's own `build_s`, and
what it measured on held-out data (its summary line). First use: `resolve_model_path("tiny:NAME")` into an
empty cache, timed inside one process (imports apart), which copies the shipped files.
`--step-parts N`: N supervised steps of the judge recipe's shape (batch 32 of judge prompts, from the shipped
policy), split into batching (host work), forward, backward and clip + AdamW, on 1 and on 2 torch threads,
alternating twice; medians of ms per step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = ("policy", "judge", "disrm", "tools")


def build(repo: Path, name: str, cache: Path) -> dict:
    """`rlrm models prepare --name NAME --force` from `repo` into `cache`; wall seconds, build_s, summary."""
    env = {**os.environ, "PYTHONPATH": str(repo), "RLRM_MODELS_DIR": str(cache)}
    cmd = [sys.executable, "-m", "rlrm", "models", "prepare", "--name", name, "--force", "--cache-dir", str(cache)]
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=repo, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - start
    folder = next(cache.glob(f"{name}-v*-seed0"))
    meta = json.loads((folder / "meta.json").read_text())
    summary = next((line.split("  ", 1)[-1] for line in out.splitlines() if line.startswith(f"{name}: ")), "")
    return {"wall_s": wall, "build_s": meta.get("build_s"), "summary": summary}


FIRST_USE = """
import json, sys, time
from rlrm.engine.models.tiny import resolve_model_path
start = time.perf_counter()
resolve_model_path("tiny:" + sys.argv[1])
print(json.dumps({"first_use_s": time.perf_counter() - start}))
"""


def first_use(name: str, cache: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RLRM_MODELS_DIR": str(cache)}
    out = subprocess.run(
        [sys.executable, "-c", FIRST_USE, name], env=env, check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])["first_use_s"]


def step_parts(steps: int) -> None:
    import random
    import statistics

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlrm.engine.models import sft, tiny_judge
    from rlrm.engine.models.tiny import resolve_model_path
    from rlrm.engine.models.tiny_pairs import reward_problems, right_response, wrong_response

    policy = resolve_model_path("tiny:policy")
    tok = AutoTokenizer.from_pretrained(policy)
    train, _ = reward_problems(0, 2000, 8)
    rng = random.Random(0)
    pairs = []
    for i, ex in enumerate(train):
        response = (right_response if i % 2 == 0 else wrong_response)(ex, rng).response
        answer = tok(tiny_judge.judge_answer(response, ex.ground_truth), add_special_tokens=False)["input_ids"]
        pairs.append((sft.chat_prompt(tok, tiny_judge.judge_messages(ex, response)), answer + [tok.eos_token_id]))
    print(f"judge prompt + answer: {statistics.mean(len(p) + len(a) for p, a in pairs):.0f} tokens on average")
    for threads in (1, 2, 1, 2):
        torch.set_num_threads(threads)
        model = AutoModelForCausalLM.from_pretrained(policy).train()
        optimizer = torch.optim.AdamW([{"params": list(model.parameters()), "base_lr": 1e-3}], lr=1e-3)
        parts: dict[str, list[float]] = {"batch": [], "forward": [], "backward": [], "optimizer": []}
        for step in range(steps):
            t0 = time.perf_counter()
            ids, labels, mask = sft.pad_answers(rng.sample(pairs, 32), tok.pad_token_id)
            t1 = time.perf_counter()
            loss = sft.answer_loss(model, ids, mask, labels)
            t2 = time.perf_counter()
            optimizer.zero_grad()
            loss.backward()
            t3 = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            t4 = time.perf_counter()
            for key, seconds in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                parts[key].append(1000 * seconds)
        row = {key: statistics.median(values) for key, values in parts.items()}
        line = "  ".join(f"{key} {ms:.1f}" for key, ms in row.items())
        print(f"{threads} thread(s): {sum(row.values()):.1f} ms/step ({line})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--baseline", type=Path, help="another checkout whose recipe to time alongside")
    parser.add_argument("--first-use-only", action="store_true")
    parser.add_argument("--keep", type=Path, help="build into this folder and keep it (default: a temporary one)")
    parser.add_argument("--step-parts", type=int, metavar="N", help="only time N judge steps, part by part")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}")
    if args.step_parts:
        return step_parts(args.step_parts)
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or Path(scratch)
        cache = tmp / "first-use"
        for name in args.models:
            print(f"first use, shipped files: tiny:{name} {first_use(name, cache):.3f} s")
        if args.first_use_only:
            return
        trees = {"this tree": REPO} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
        for name in args.models:
            for label, repo in trees.items():
                row = build(repo, name, tmp / label.replace(" ", "-"))
                print(
                    f"build {name:6s} {label:9s}: {row['wall_s']:6.1f} s wall, build_s {row['build_s']}, {row['summary']}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
