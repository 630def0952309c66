"""The must-not-change check of a refactor: every non-timing metric of tiny-rule, 3 steps, each mode, stays identical.

    # on the code before the change (a clone or a stash), then on the code after:
    python scripts/same_metrics.py run /tmp/before      # rlrm train --profile tiny-rule --steps 3 --mode M --seed 0
    python scripts/same_metrics.py run /tmp/after
    python scripts/same_metrics.py diff /tmp/before /tmp/after   # exit 1 and one line per difference

Timing, CPU-time, perf, idle and reward-latency keys (and anything else in seconds) differ between any two runs
and are left out; every other key (scores, advantages, losses, grad norms, lengths, staleness, counters) is compared.
In fully-async the reward loop's counters count samples when their scores arrive, which runs ahead of training by
however much the timing allows: there they are compared as totals over the run, not step by step.
Run from the checkout under test (the `rlrm` on PYTHONPATH is the one measured).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

MODES = ("sync", "stream", "pipeline", "one-step-off", "fully-async")
# measured, not computed: wall and CPU time, idle ratios, and the reward calls' own latency quantiles
TIMING_PREFIXES = ("timing_s/", "cpu_s/", "perf/", "idle/", "reward/latency_")
# counted when scores arrive (rlrm/engine/rewards/loop.py, RewardStats): per step only where scoring waits for the step
ARRIVAL_COUNTERS = (
    "reward/samples",
    "reward/failures",
    "reward/retries",
    "reward/timeouts",
    "reward/unparsed",
    "reward/nonfinite",
    "reward/defaulted",
    "reward/model_calls",
    "reward/judge_prompt_tokens",
    "reward/judge_completion_tokens",
)
SCORED_AHEAD = ("fully-async",)  # modes whose scoring runs ahead of the step that trains the samples


def run(out: Path, steps: int = 3) -> None:
    """Train tiny-rule for `steps` steps in every mode, one run folder per mode under `out`."""
    for mode in MODES:
        argv = [sys.executable, "-m", "rlrm", "train", "--profile", "tiny-rule", "--steps", str(steps)]
        argv += ["--mode", mode, "--seed", "0", "--out", str(out / mode), "--overwrite", "--console", "none"]
        subprocess.run(argv, check=True)


def kept(row: dict) -> dict:
    """A metrics row without the keys that measure time (those differ between any two runs)."""
    return {k: v for k, v in row.items() if not k.startswith(TIMING_PREFIXES) and not k.endswith("_s")}


def rows(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [kept(json.loads(line)) for line in lines if line.strip()]


def diff(before: Path, after: Path) -> list[str]:
    """One line per metric (mode, step, key) that differs; empty when every kept metric is identical."""
    problems = []
    for mode in MODES:
        old, new = rows(before / mode), rows(after / mode)
        if len(old) != len(new):
            problems.append(f"{mode}: {len(old)} rows before, {len(new)} after")
        if mode in SCORED_AHEAD:
            for key in ARRIVAL_COUNTERS:
                a, b = sum(r.pop(key, 0) for r in old), sum(r.pop(key, 0) for r in new)
                if a != b:
                    problems.append(f"{mode} over the run: {key} {a!r} -> {b!r}")
        for a, b in zip(old, new):
            for key in sorted(set(a) | set(b)):
                if a.get(key) != b.get(key):
                    problems.append(f"{mode} step {a.get('step')}: {key} {a.get(key)!r} -> {b.get(key)!r}")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "run":
        run(Path(argv[1]))
        return 0
    if len(argv) == 3 and argv[0] == "diff":
        problems = diff(Path(argv[1]), Path(argv[2]))
        for line in problems:
            print(line)
        n = sum(len(rows(Path(argv[1]) / m)) for m in MODES)
        print(f"{len(problems)} differences over {len(MODES)} modes ({n} rows)")
        return 1 if problems else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
