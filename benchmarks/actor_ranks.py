"""The actor's share of a tiny-rule step on N ranks against the in-process actor, alternated in one run.

    .venv/bin/python benchmarks/actor_ranks.py --rounds 5 [--baseline-ref main]

One "step" is what the actor does in a tiny-rule step: old log-probs of 32 prompts x 8 samples (20
response tokens), one optimizer step on the 256 samples, and the full weights for the rollout engine.
Variants, run A B C D A B C D ... on the same batch, each timed by wall clock:
- A `baseline`: the in-process Actor of `--baseline-ref` (git show of rlrm/engine/actor/actor.py), as
  before ranks existed;
- B `ws1`: today's in-process Actor (what actor.world_size=1 runs);
- C `ranks1`: one spawned FSDP2 rank driven by the rank-group actor (the N-rank code path, N=1);
- D `ranks2`: two spawned FSDP2 gloo ranks, one thread each.
A and B use 2 torch threads, C one rank of 2 threads, D two ranks of 1: the same 2 cores each time.
Prints per-variant median seconds, the median of the per-round ratios B/A, C/A, D/A and D/C, and the
peak memory of each rank process (ru_maxrss on CPU, CUDA max allocated on GPU) next to the trainer's.
On 2 CPU cores ranks cannot be faster; the point is the cost of the rank path.
"""

from __future__ import annotations

import argparse
import importlib.util
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from rlrm.config.loader import load_profile
from rlrm.engine.actor.actor import Actor
from rlrm.engine.actor.batch import collate
from rlrm.engine.actor.group import RankGroupActor
from rlrm.engine.actor.rank import RankSpec
from rlrm.engine.executor.rank_procs import RankProcesses
from rlrm.engine.models.tiny import resolve_model_path
from rlrm.inference.base import Completion
from rlrm.inference.loading import load_causal_lm

REPO = Path(__file__).resolve().parents[1]


def _batch(model):
    gen = torch.Generator().manual_seed(0)
    completions = []
    for g in range(32):
        prompt = torch.randint(5, 400, (int(torch.randint(36, 52, (1,), generator=gen)),), generator=gen).tolist()
        for _ in range(8):
            length = int(torch.randint(6, 21, (1,), generator=gen))
            completions.append(
                Completion(prompt, torch.randint(5, 400, (length,), generator=gen).tolist(), [-2.0] * length, "stop")
            )
    batch = collate(completions, pad_token_id=0)
    batch.group_ids = torch.arange(len(batch)) // 8
    batch.advantages = torch.randn(len(batch), generator=gen)
    return batch


def _step(actor, batch) -> float:
    start = time.perf_counter()
    batch.old_log_prob = actor.compute_old_log_prob(batch)
    actor.update(batch)
    actor.policy_state_dict()
    return time.perf_counter() - start


def _baseline_actor_class(ref: str):
    """The Actor class of `ref` (its actor.py loaded beside today's modules)."""
    source = subprocess.run(
        ["git", "show", f"{ref}:rlrm/engine/actor/actor.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "baseline_actor.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("baseline_actor", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Actor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline-ref", default="main")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(2)
    path = resolve_model_path("tiny:policy")
    base = ["actor.micro_batch_size=256", f"trainer.device={args.device}"]
    profiles = {w: load_profile("tiny-rule", overrides=[*base, f"actor.world_size={w}"]) for w in (1, 2)}
    p1 = profiles[1]
    batch = _batch(load_causal_lm(path, "float32", "cpu"))

    def local(cls):
        model = load_causal_lm(path, "float32", args.device)
        return cls(model, None, p1.actor, temperature=1.0, total_steps=100, n=8)

    def ranks(world: int, threads: int):
        spec = RankSpec(profiles[world], path, None, world_size=world, device=args.device, threads=threads)
        group = RankProcesses(spec)
        group.start()
        return RankGroupActor(group, load_causal_lm(path, "float32", "cpu"), profiles[world])

    variants = {
        "baseline": local(_baseline_actor_class(args.baseline_ref)),
        "ws1": local(Actor),
        "ranks1": ranks(1, 2),
        "ranks2": ranks(2, 1),
    }
    times = {name: [] for name in variants}
    try:
        for name, actor in variants.items():  # warm-up
            _step(actor, batch.to(args.device) if name in ("baseline", "ws1") else batch)
        for _ in range(args.rounds):
            for name, actor in variants.items():
                times[name].append(_step(actor, batch.to(args.device) if name in ("baseline", "ws1") else batch))
        memory = {
            name: a.ranks.call_all("peak_memory_gb") for name, a in variants.items() if isinstance(a, RankGroupActor)
        }
    finally:
        for actor in variants.values():
            if isinstance(actor, RankGroupActor):
                actor.close()
    for name, values in times.items():
        print(f"{name:9s} median {statistics.median(values):.3f} s  ({', '.join(f'{v:.3f}' for v in values)})")

    def ratio(a, b):
        return statistics.median(x / y for x, y in zip(times[a], times[b]))

    print(
        f"ws1/baseline {ratio('ws1', 'baseline'):.3f}   ranks1/baseline {ratio('ranks1', 'baseline'):.3f}   "
        f"ranks2/baseline {ratio('ranks2', 'baseline'):.3f}   ranks2/ranks1 {ratio('ranks2', 'ranks1'):.3f}"
    )
    trainer_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        f"peak memory GB: trainer process {trainer_gb:.2f} (holds A, B and the full copies); "
        + "; ".join(f"{n}: " + ", ".join(f"rank {r} {g:.2f}" for r, g in enumerate(v)) for n, v in memory.items())
    )


if __name__ == "__main__":
    sys.exit(main())
