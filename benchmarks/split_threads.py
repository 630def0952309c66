"""Does splitting the torch threads between generation and the update help the overlapping modes?

    PYTHONPATH=. .venv/bin/python benchmarks/split_threads.py [PAIRS] [OUT]

Alternates (A B A B ...) `rlrm bench reward-latency --modes sync,one-step-off,fully-async --repeats 1` with
`trainer.split_threads` true (A) and false (B) on the default profile and latency, PAIRS pairs (default 4),
folders under OUT (default bench/split-threads). Prints, per overlapping mode, the median over pairs of
A's step time / B's (below 1: splitting is faster) and each side's median `of limit` and speedup over sync.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from statistics import median

MODES = ("one-step-off", "fully-async")


def run(out: Path, split: bool) -> dict:
    argv = [sys.executable, "-m", "rlrm", "bench", "reward-latency", "--modes", "sync," + ",".join(MODES)]
    argv += ["--repeats", "1", "--out", str(out), "--set", f"trainer.split_threads={str(split).lower()}"]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "summary.json").read_text())["modes"]


def main(pairs: int, root: Path) -> None:
    sides: dict[bool, list[dict]] = {True: [], False: []}
    for i in range(pairs):
        for split in (True, False):
            sides[split].append(run(root / f"pair{i}-{'split' if split else 'shared'}", split))
            print(f"pair {i} {'split' if split else 'shared'} done", file=sys.stderr)
    print(f"| mode | step split/shared (median of {pairs} pairs) | of limit split | shared | speedup split | shared |")
    print("|---|---|---|---|---|---|")
    for mode in MODES:
        ratio = median(a[mode]["step_time_mean"] / b[mode]["step_time_mean"] for a, b in zip(sides[True], sides[False]))
        lim = [median(s[mode]["of_limit"] for s in sides[k]) for k in (True, False)]
        spd = [median(s[mode]["speedup_vs_sync"] for s in sides[k]) for k in (True, False)]
        print(f"| {mode} | {ratio:.3f} | {lim[0]:.2f} | {lim[1]:.2f} | {spd[0]:.2f} | {spd[1]:.2f} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4, Path(sys.argv[2] if len(sys.argv) > 2 else "bench/split-threads"))
