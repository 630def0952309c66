"""Each scheduling mode's physical limit: the shortest step it could reach with perfect overlap. Pure.

    phases = baseline_phases([read_metrics(p) for p in baseline_metrics_files])
    latency = batch_latency(parse_latency("uniform:1:40").scaled(0.016), samples=256)
    bound_s = mode_bound("fully-async", phases, latency, Shape(max_staleness=2, minibatches=1, epochs=1))
    of_limit = bound_s / measured_step_s              # 1.0: nothing left on the table

The inputs are the zero-latency sync runs' phase times per step (medians over the steps after the first,
the warm-up): generation `G`, reward scoring `R0`, the trainer's work `T` (old/ref log-probs, advantages,
the update, the weight sync) and, inside `T`, the old/ref log-prob passes `P` and the advantages `A`; and
the injected latency of one batch: its mean `l` and the expected slowest sample of a batch `L` (Monte Carlo
over the latency spec, seeded). A batch cannot be fully scored sooner than `W = max(G + l, L)` after its
launch: its last sample leaves generation at `G` and then waits its own latency (mean `l`), and no sample
waits less than its latency (slowest `L`). The old/ref passes need the samples, not their scores: stream,
pipeline and one-step-off run them while the rewards arrive, so a batch is ready to train no sooner than
`V = max(G + P, W)`; the advantages need the scores. Then, with `s` = trainer.max_staleness and the update
split in `M` mini-batches over `E` epochs:

    sync          G + max(R0, L) + T                scores once the whole batch is generated
    stream        V + T - P                         scores each sample as it is generated
    pipeline      V + A/M + (T - P - A) * (1 - (M-1)/(M*E))
                                                    trains epoch 0's mini-batches while later ones are scored
    one-step-off  max(G, T, (V + T - P) / 2, C)     batch k+1 is generated while batch k is scored and trained
    fully-async   max(G, T, (W + T) / (s+1), C)     s+1 batches in flight; the trainer takes scored groups

Pipeline computes each mini-batch's advantages once its groups are scored: `A/M` of them are left after
the last score. The off-policy bounds come from the launch rule (batch k starts once the trainer holds
version k - 1 - max_ahead): k's training ends at least `V + T - P` after version k-1-max_ahead (fully-async
prepares the groups it takes once they are scored: `W + T`), so (max_ahead + 1) steps take at least that;
and generation and training each run one step at a time. Overlapped on
the same CPU cores (the in-process engine), generation and training also cannot take less than their
work: `C` = (CPU seconds of generation + of the trainer's work in a zero-latency sync step) / the cores
this process may use (`cpu_s/*` of the sync runs; 0 when the runs hold none, e.g. on a GPU, and then the
bound assumes separate resources). The on-policy bounds already add G and T, which is never less than C.
Everything a real step adds on top (Python between phases, lock waits, the GIL, prompt encoding, metrics)
is overhead the bound leaves out: `of_limit` = bound / measured step time says how much of it is left.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from rlrm.stats import quantile

TRAINER_PHASES = ("old_log_prob", "ref", "adv", "update_actor", "update_weights")


@dataclass(frozen=True)
class Phases:
    """Seconds per step of a zero-latency sync run: generation, reward scoring, the trainer's work."""

    gen: float
    reward: float
    train: float
    step: float
    # C: generation and the trainer's work together on the machine's cores: their CPU seconds / cores (0: unknown)
    cores: float = 0.0
    prepare: float = 0.0  # P, inside `train`: the old/ref log-prob passes, which need no scores
    adv: float = 0.0  # A, inside `train`: the advantages, which do


@dataclass(frozen=True)
class BatchLatency:
    mean: float  # l: one sample's mean injected latency
    slowest: float  # L: the expected slowest of a batch's samples


@dataclass(frozen=True)
class Shape:
    max_staleness: int
    minibatches: int = 1
    epochs: int = 1


def baseline_phases(runs: list[list[dict]]) -> Phases:
    """Median phase times over the steps of zero-latency sync runs (each a list of metrics rows).

    The first step of each run is left out when the run has more (model warm-up, first allocations)."""
    gen, reward, train, step, cores, prepare, adv = [], [], [], [], [], [], []
    for rows in runs:
        steps = [r for r in rows if r.get("step", 0) > 0 and "timing_s/step" in r]
        for r in steps[1:] if len(steps) > 1 else steps:
            gen.append(r.get("timing_s/gen", 0.0))
            reward.append(r.get("timing_s/reward", 0.0))
            train.append(sum(r.get(f"timing_s/{p}", 0.0) for p in TRAINER_PHASES))
            step.append(r["timing_s/step"])
            cores.append(_cores_s(r, train[-1]))
            prepare.append(r.get("timing_s/old_log_prob", 0.0) + r.get("timing_s/ref", 0.0))
            adv.append(r.get("timing_s/adv", 0.0))
    if not step:
        raise ValueError("no completed step with phase times (timing_s/*) in the zero-latency sync runs")
    gen_s, reward_s, train_s, step_s, prepare_s, adv_s = (
        quantile(x, 0.5) for x in (gen, reward, train, step, prepare, adv)
    )
    known = [c for c in cores if c > 0]
    return Phases(
        gen_s,
        reward_s,
        train_s,
        step_s,
        cores=quantile(known, 0.5) if len(known) == len(cores) else 0.0,
        prepare=prepare_s,
        adv=adv_s,
    )


def _cores_s(row: dict, train_s: float) -> float:
    """C of one sync step: the CPU seconds of generation and of the trainer's work over the cores this process
    may use (the update's cores-busy share stands for the trainer's other, shorter phases). 0 when the row
    holds no CPU times (a run on a GPU, or from an rlrm before they were recorded)."""
    gen_s, update_s = row.get("timing_s/gen", 0.0), row.get("timing_s/update_actor", 0.0)
    needed = ("cpu_s/gen", "cpu_s/update_actor", "perf/cpu_cores")
    if not all(k in row for k in needed) or gen_s <= 0 or update_s <= 0:
        return 0.0
    return (row["cpu_s/gen"] + train_s * row["cpu_s/update_actor"] / update_s) / row["perf/cpu_cores"]


def batch_latency(dist, samples: int, draws: int = 400, seed: int = 0) -> BatchLatency:
    """Mean latency and the expected slowest of `samples` draws of `dist` (a LatencyDist, scaled)."""
    if dist is None or dist.is_zero:
        return BatchLatency(0.0, 0.0)
    rng = random.Random(seed)
    slowest = [max(dist.sample(rng) for _ in range(samples)) for _ in range(draws)]
    try:
        mean = dist.mean()
    except ValueError:  # a trace or a tail without a closed form: the draws' own mean
        mean = sum(dist.sample(rng) for _ in range(samples * 20)) / (samples * 20)
    return BatchLatency(mean, sum(slowest) / len(slowest))


def mode_bound(mode: str, p: Phases, lat: BatchLatency, shape: Shape) -> float:
    """The lower bound on `mode`'s step time (seconds); see the module docstring for the derivation."""
    scored = max(p.gen + lat.mean, lat.slowest, p.gen)  # W: the earliest a batch is fully scored
    ready = max(p.gen + p.prepare, scored)  # V: old/ref log-probs computed while the rewards arrive
    after = p.train - p.prepare  # T - P: what needs the scores
    if mode == "sync":
        return p.gen + max(p.reward, lat.slowest) + p.train
    if mode == "stream":
        return ready + after
    if mode == "pipeline":
        m, e = max(shape.minibatches, 1), max(shape.epochs, 1)
        return ready + p.adv / m + (after - p.adv) * (1.0 - (m - 1) / (m * e))
    if mode == "one-step-off":
        return max(p.gen, p.train, (ready + after) / 2, p.cores)
    if mode == "fully-async":
        return max(p.gen, p.train, (scored + p.train) / (shape.max_staleness + 1), p.cores)
    raise ValueError(f"no bound for mode {mode!r}")


def of_limit(bound_s: float, step_s: float) -> float:
    """bound / measured step time (NaN when either is unknown)."""
    if not (math.isfinite(bound_s) and math.isfinite(step_s)) or step_s <= 0:
        return math.nan
    return bound_s / step_s
