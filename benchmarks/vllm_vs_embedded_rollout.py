"""rlrm's embedded policy server vs the real vLLM for rollout: tokens/s over tiny-rule steps, weight reload per step.

    RLRM_VLLM_PYTHON=... .venv/bin/python benchmarks/vllm_vs_embedded_rollout.py [--pairs 3] [--steps 6] [--warmup 2]

Starts one policy replica of each backend once, through rlrm's fleet code (ServerPool with the argv and
environment `rollout.server.backend` gives: the embedded server, and vLLM with VLLM_SERVER_DEV_MODE=1 and whole
prefills), each with one CPU thread. Then alternates A B A B ... runs of `rlrm train --profile tiny-rule` (sync,
no validation, no checkpoints) as separate processes, the same client (rollout.backend=server) pointed at the
running replica through `rollout.server.addresses`: A embedded, B vLLM. From each run's metrics.jsonl, after
`--warmup` steps:
- tokens/s: generated tokens (`perf/response_tokens`) over the summed step time (`timing_s/step`): every cost of
  serving on that backend is in it, including the actor's recompute of old log-probs, which
  `recompute_old_log_prob=auto` does for vLLM (it scores tokens with its own code) and not for the embedded server;
- generation tokens/s: the same over `timing_s/gen` only;
- reload per step: median `timing_s/update_weights` (write the safetensors, then the embedded
  /update_weights_from_disk or vLLM's /collective_rpc reload_weights + /reset_prefix_cache);
- old log-prob per step: median `timing_s/old_log_prob`.
Prints every run, the vLLM / embedded ratio of each pair and the medians of those ratios (> 1: vLLM higher).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(name: str, url: str, served_name: str, args, out: Path) -> list[dict]:
    run_dir = out / f"{name}-{len(list(out.iterdir()))}"
    argv = [sys.executable, "-m", "rlrm", "train", "--profile", "tiny-rule", "--out", str(run_dir)]
    argv += ["--console", "none", "--steps", str(args.steps + args.warmup)]
    settings = [
        "trainer.val_every=0",
        "trainer.val_before_train=false",
        "trainer.save_every=0",
        f"trainer.num_threads={args.threads}",
        "rollout.backend=server",
        f"rollout.server.backend={name}",
        f"rollout.server.addresses=[{url}]",
    ]
    if name == "vllm":  # what the completions requests name (a hand-started vLLM serves its --model path)
        settings.append(f"rollout.server.served_model_name={served_name}")
    for item in settings:
        argv += ["--set", item]
    subprocess.run(argv, check=True, env=os.environ.copy(), stdout=subprocess.DEVNULL)
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def summarise(rows: list[dict], warmup: int) -> dict:
    rows = [r for r in rows if r["step"] > warmup]
    step_s = sum(r["timing_s/step"] for r in rows)
    tokens = sum(r["perf/response_tokens"] for r in rows)
    return {
        "tokens_per_s": tokens / step_s,
        "gen_tokens_per_s": tokens / sum(r["timing_s/gen"] for r in rows),
        "reload_s": statistics.median(r["timing_s/update_weights"] for r in rows),
        "old_log_prob_s": statistics.median(r.get("timing_s/old_log_prob", 0.0) for r in rows),
        "step_s": statistics.median(r["timing_s/step"] for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the trainer and of each replica")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))  # vLLM's torch threads (the embedded: --threads)
    from rlrm.engine.models.tiny import resolve_model_path
    from rlrm.launch.fleet.backends import ReplicaLaunch
    from rlrm.launch.fleet.pool import ServerPool
    from rlrm.launch.fleet.spec import FleetSpec

    policy = resolve_model_path("tiny:policy")
    pools = {
        backend: ServerPool(
            ReplicaLaunch.of(
                FleetSpec(backend=backend, threads=args.threads, max_batch=256),
                "policy",
                policy,
                served_model_name=policy,
            )
        )
        for backend in ("embedded", "vllm")
    }
    try:
        t0 = time.monotonic()
        for pool in pools.values():
            for server in pool.servers:
                server.launch()
        for backend, pool in pools.items():
            for server in pool.servers:
                server.start_timeout_s = 900
                server.wait_ready()
            print(f"{backend} policy replica healthy ({time.monotonic() - t0:.0f} s since launch)", flush=True)
        compare({b: p.urls[0] for b, p in pools.items()}, policy, args)
    finally:
        for pool in pools.values():
            pool.stop()


def compare(urls: dict[str, str], served_name: str, args) -> None:
    results: dict[str, list[dict]] = {name: [] for name in urls}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            for name, url in urls.items():
                s = summarise(run(name, url, served_name, args, Path(tmp)), args.warmup)
                results[name].append(s)
                print(
                    f"pair {pair} {name:8s} tokens/s {s['tokens_per_s']:7.1f}  gen tokens/s {s['gen_tokens_per_s']:7.1f}"
                    f"  reload/step {s['reload_s'] * 1e3:6.1f} ms  old log-prob/step {s['old_log_prob_s'] * 1e3:6.1f} ms"
                    f"  median step {s['step_s']:.3f} s",
                    flush=True,
                )
    for key, label in (
        ("tokens_per_s", "tokens/s (whole step)"),
        ("gen_tokens_per_s", "generation tokens/s"),
        ("reload_s", "weight reload time per step"),
        ("step_s", "step time"),
    ):
        ratios = [b[key] / a[key] for a, b in zip(results["embedded"], results["vllm"])]
        print(
            f"{label}: vllm/embedded per pair {[round(r, 3) for r in ratios]}, median {statistics.median(ratios):.3f}"
        )


if __name__ == "__main__":
    main()
