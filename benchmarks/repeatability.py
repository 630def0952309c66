"""Do invocations of the default `rlrm bench reward-latency` agree? Runs it N times back to back (or reads
folders it already wrote) and prints each mode's median speedup, idle ratios and `of limit` per invocation,
with the largest disagreement between any two (speedup: max/min - 1; idle ratios: max - min).

    PYTHONPATH=. .venv/bin/python benchmarks/repeatability.py run 5 bench/repeatability   # 5 new invocations
    PYTHONPATH=. .venv/bin/python benchmarks/repeatability.py run 5 bench/r7 --repeats 7  # with other options
    PYTHONPATH=. .venv/bin/python benchmarks/repeatability.py read bench/repeatability/inv*  # existing folders

The issue's target: every speedup within 7% and every idle ratio within 0.05 between invocations.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path


def invoke(out: Path, options: list[str]) -> float:
    start = time.perf_counter()
    argv = [sys.executable, "-m", "rlrm", "bench", "reward-latency", "--out", str(out), *options]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def table(folders: list[Path]) -> None:
    summaries = [json.loads((f / "summary.json").read_text())["modes"] for f in folders]
    print(f"| mode | speedup per invocation ({len(folders)}) | largest disagreement | idle trainer | idle rollout |"
          " of limit |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    worst = {"speedup": 0.0, "idle": 0.0}
    for mode in summaries[0]:
        speed = [s[mode]["speedup_vs_sync"] for s in summaries]
        trainer = [s[mode]["idle_trainer"] for s in summaries]
        rollout = [s[mode]["idle_rollout"] for s in summaries]
        limit = [s[mode].get("of_limit") for s in summaries]
        apart = max(speed) / min(speed) - 1
        worst["speedup"] = max(worst["speedup"], apart)
        worst["idle"] = max(worst["idle"], max(trainer) - min(trainer), max(rollout) - min(rollout))
        quiet = sum(bool(s[mode].get("within_noise")) for s in summaries)
        noise = f" (within noise in {quiet})" if quiet else ""
        print(
            f"| {mode} | {' / '.join(f'{x:.2f}x' for x in speed)}{noise} | {apart:.1%} | "
            f"{min(trainer):.2f}-{max(trainer):.2f} | {min(rollout):.2f}-{max(rollout):.2f} | "
            f"{' / '.join('-' if x is None else f'{x:.2f}' for x in limit)} |"
        )
    print(f"largest speedup disagreement {worst['speedup']:.1%}; largest idle-ratio disagreement {worst['idle']:.3f}")
    # the injected latency each invocation drew (its median scale): a speedup over sync grows with it
    means = [json.loads((f / "summary.json").read_text()).get("mean_latency_s") for f in folders]
    print("mean injected latency per invocation: " + " / ".join("-" if m is None else f"{m:.3f} s" for m in means))


def main(argv: list[str]) -> None:
    if argv[0] == "run":
        n, root, options = int(argv[1]), Path(argv[2]), argv[3:]
        folders = [root / f"inv{i + 1}" for i in range(n)]
        for f in folders:
            print(f"{f}: {invoke(f, options):.0f} s", file=sys.stderr)
    else:
        folders = [Path(a) for a in argv[1:]]
    table(folders)


if __name__ == "__main__":
    main(sys.argv[1:] or ["run", "5", "bench/repeatability"])
