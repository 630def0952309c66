"""How long `rlrm bench simulate` takes for a cluster-sized run: 1,000 steps of 1,024 prompts x 5 samples.

    .venv/bin/python benchmarks/simulate_speed.py [--steps 1000] [--spec examples/cluster-gpu.yaml] [--profile]

Draws every sample once (and the zero-latency baseline's), then simulates the baseline and every
mode, nothing written; prints CPU and wall seconds per part and in all (CPU seconds are the figure
to compare on a shared machine: the simulator is single-threaded). --profile prints the
functions that took longest.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from pathlib import Path

from rlrm.bench.simulate.draws import draw_workload
from rlrm.bench.simulate.simulation import simulate
from rlrm.bench.simulate.spec import load_spec

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--spec", default=str(REPO / "examples" / "cluster-gpu.yaml"))
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    spec = load_spec(
        args.spec, [f"workload.steps={args.steps}", "workload.prompts_per_step=1024", "workload.samples_per_prompt=5"]
    )
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    total_cpu, total_wall = 0.0, 0.0

    def both_draws():
        with_latency = draw_workload(spec)
        return with_latency, draw_workload(spec, latency=False, lengths=with_latency)

    parts = [("draws", both_draws)]
    draws = {}

    def run_mode(mode, baseline=False):
        return lambda: simulate(spec, mode, draws["base" if baseline else "lat"])

    parts += [("sync (zero latency)", run_mode("sync", baseline=True))] + [(m, run_mode(m)) for m in spec.modes]
    for name, fn in parts:
        cpu, wall = time.process_time(), time.perf_counter()
        out = fn()
        if name == "draws":
            draws["lat"], draws["base"] = out
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        total_cpu, total_wall = total_cpu + cpu, total_wall + wall
        print(f"{name:22s} cpu {cpu:6.2f} s  wall {wall:6.2f} s")
    print(
        f"{'total':22s} cpu {total_cpu:6.2f} s  wall {total_wall:6.2f} s  ({args.steps} steps x 1024 x 5 samples, "
        f"{len(spec.modes)} modes + baseline)"
    )
    if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
