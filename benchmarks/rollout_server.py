"""Rollout through servers vs in process: tokens/s and the share of step time spent syncing weights.

    .venv/bin/python benchmarks/rollout_server.py [--pairs 3] [--steps 8] [--warmup 2] [--configs server-1,...] [--set KEY=VALUE ...]
    .venv/bin/python benchmarks/rollout_server.py --sync [--replicas 2] [--pairs 3] [--steps 6]

Runs `rlrm train --profile tiny-rule` (sync mode, no validation, no checkpoints) as separate
processes, alternating A B1 B2 C2 A B1 B2 C2 ...: A generates in process (`rollout.backend=hf`), B1
with one embedded replica (`rollout.backend=server`, `rollout.server.replicas=1`; its requests go
batched), B2 with two behind the SGLang router (when installed: requests one by one, as the router
takes them), C2 with two behind rlrm's balancer (`rollout.server.router=client`: batched). The replicas get `trainer.num_threads`
threads each, as the in-process engine has. From each run's metrics.jsonl, after `--warmup` steps:
- tokens/s: generated tokens (`perf/response_tokens`) over the summed step time (`timing_s/step`),
  so every cost of serving (HTTP, JSON, the weight sync) is in it;
- generation tokens/s: the same over `timing_s/gen` only;
- sync share: `timing_s/update_weights` (write the safetensors + every replica loads them) over
  `timing_s/step`.
Printed per run, then per pair the ratios B1/A, B2/A and C2/A of tokens/s and their medians. On 2 CPU
cores two replicas share the cores the trainer also uses: they cannot be faster here, the figure
shows the overhead; their speed-up needs replicas on other devices or nodes.

`--sync` compares the two weight syncs instead, alternating D X D X ...: D writes safetensors that
every replica loads (`rollout.server.weight_sync=disk`), X broadcasts over a gloo group
(`weight_sync=distributed`), both with `--replicas` replicas behind rlrm's balancer. Per run: the
median sync time per step (`timing_s/update_weights`) and the sync share of step time; per pair
the ratio X/D of the sync time, and its median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CONFIGS = {
    "hf": ["rollout.backend=hf"],
    "server-1": ["rollout.backend=server", "rollout.server.replicas=1"],
    "server-2": ["rollout.backend=server", "rollout.server.replicas=2"],
    "server-2-client": ["rollout.backend=server", "rollout.server.replicas=2", "rollout.server.router=client"],
}
SYNC_CONFIGS = {
    "disk": ["rollout.backend=server", "rollout.server.router=client", "rollout.server.weight_sync=disk"],
    "distributed": ["rollout.backend=server", "rollout.server.router=client", "rollout.server.weight_sync=distributed"],
}


def run(name: str, steps: int, threads: int, overrides: list[str], out: Path) -> list[dict]:
    run_dir = out / f"{name}-{len(list(out.iterdir()))}"
    argv = [
        sys.executable,
        "-m",
        "rlrm",
        "train",
        "--profile",
        "tiny-rule",
        "--out",
        str(run_dir),
        "--console",
        "none",
        "--steps",
        str(steps),
        "--set",
        "trainer.val_every=0",
        "--set",
        "trainer.val_before_train=false",
        "--set",
        "trainer.save_every=0",
        "--set",
        f"trainer.num_threads={threads}",
        "--set",
        f"rollout.server.threads={threads}",
    ]
    for item in {**CONFIGS, **SYNC_CONFIGS}[name] + overrides:
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
        "sync_share": sum(r["timing_s/update_weights"] for r in rows) / step_s,
        "step_s": statistics.median(r["timing_s/step"] for r in rows),
        "sync_s": statistics.median(r["timing_s/update_weights"] for r in rows),
        "retries": sum(r.get("rollout/retries", 0) for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the trainer and of each replica")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"which of {', '.join(CONFIGS)} (hf always runs)")
    parser.add_argument("--sync", action="store_true", help="compare weight_sync=disk and distributed instead")
    parser.add_argument("--replicas", type=int, default=2, help="--sync: replicas of both runs")
    args = parser.parse_args()
    if args.sync:
        compare_syncs(args)
        return
    names = ["hf", *(n for n in args.configs.split(",") if n in CONFIGS and n != "hf")]
    results = alternate(
        names,
        args,
        args.overrides,
        lambda s: (
            f"tokens/s {s['tokens_per_s']:8.1f}  gen tokens/s {s['gen_tokens_per_s']:8.1f}  sync share {s['sync_share']:6.1%}"
            f"  median step {s['step_s']:.3f} s  retries {s['retries']:.0f}"
        ),
    )
    for name in names[1:]:
        ratios = [b["tokens_per_s"] / a["tokens_per_s"] for a, b in zip(results["hf"], results[name])]
        gen = [b["gen_tokens_per_s"] / a["gen_tokens_per_s"] for a, b in zip(results["hf"], results[name])]
        shares = [b["sync_share"] for b in results[name]]
        print(
            f"{name}: tokens/s vs hf per pair {[round(r, 3) for r in ratios]}, median {statistics.median(ratios):.3f}; "
            f"generation only: median {statistics.median(gen):.3f}; sync share median {statistics.median(shares):.1%}"
        )


def alternate(names: list[str], args, overrides: list[str], line) -> dict[str, list[dict]]:
    """`args.pairs` rounds of A B ... (each a fresh run of `names` in order); per name its runs' summaries."""
    results: dict[str, list[dict]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            for name in names:
                stats = summarise(run(name, args.steps + args.warmup, args.threads, overrides, Path(tmp)), args.warmup)
                results[name].append(stats)
                print(f"pair {pair} {name:15s} {line(stats)}", flush=True)
    return results


def compare_syncs(args) -> None:
    """D X D X ...: disk and distributed weight sync, the same replicas and steps; medians of pair ratios."""
    overrides = [f"rollout.server.replicas={args.replicas}", *args.overrides]
    results = alternate(
        list(SYNC_CONFIGS),
        args,
        overrides,
        lambda s: (
            f"sync per step {s['sync_s'] * 1e3:7.1f} ms  sync share {s['sync_share']:6.1%}  median step {s['step_s']:.3f} s"
            f"  tokens/s {s['tokens_per_s']:8.1f}"
        ),
    )
    ratios = [x["sync_s"] / d["sync_s"] for d, x in zip(results["disk"], results["distributed"])]
    print(
        f"distributed/disk sync time per pair {[round(r, 3) for r in ratios]}, median {statistics.median(ratios):.3f}; "
        f"sync share median: disk {statistics.median(r['sync_share'] for r in results['disk']):.1%}, distributed "
        f"{statistics.median(r['sync_share'] for r in results['distributed']):.1%}"
    )


if __name__ == "__main__":
    main()
