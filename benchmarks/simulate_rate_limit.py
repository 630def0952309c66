"""Does the simulator know a hosted judge's rate limit? Predicted against measured step time.

    PYTHONPATH=. .venv/bin/python benchmarks/simulate_rate_limit.py [--rpm 240] [--steps 8] [--modes sync,fully-async]

For each mode: trains tiny-genrm for `--steps` steps with its judge replaced by the test suite's local stand-in
for a rate-limited OpenAI-compatible API (tests/fixtures/standin_openai_api.py, not a provider) and
`reward.limits.rpm` equal to the stand-in's limit; then `rlrm bench simulate --from` that run folder (costs
fitted to the run, `reward.limits` read from its profile) predicts the run's own mode. Prints the measured and
predicted mean step time after the first step, and the error. The run's reward phase is rate-bound: a batch of
B samples needs B * 60/rpm seconds of judge budget.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fixtures"))


def rlrm(*args: str, env: dict) -> None:
    subprocess.run([sys.executable, "-m", "rlrm.cli", *args], check=True, env=env, stdout=subprocess.DEVNULL)


def mean_step(rows: list[dict]) -> float:
    times = [r["perf/time_per_step"] for r in rows if r.get("step", 0) > 1 and "perf/time_per_step" in r]
    return sum(times) / len(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rpm", type=float, default=240.0)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--modes", default="sync,fully-async")
    args = parser.parse_args()
    from standin_openai_api import StandinOpenAIAPI

    key = "standin-key-for-the-benchmark"
    env = {**os.environ, "STANDIN_KEY": key, "PYTHONPATH": str(REPO)}
    work = Path(tempfile.mkdtemp(prefix="rlrm-simrate-"))
    print("| mode | calls per step | measured step s | predicted step s | error | 429s |")
    print("|---|---|---|---|---|---|")
    for mode in args.modes.split(","):
        with StandinOpenAIAPI(key, rpm=args.rpm) as api:
            run = work / f"run-{mode}"
            sets = [
                f"reward.server.addresses=[{api.base_url}]",
                f"reward.server.model={api.model}",
                "reward.server.api_key_env=STANDIN_KEY",
                f"reward.limits.rpm={args.rpm}",
                "data.train_batch_size=4",
                "actor.mini_batch_size=4",
                "rollout.n=4",
                f"trainer.mode={mode}",
                f"trainer.total_steps={args.steps}",
                f"trainer.val_every={args.steps}",
                "trainer.val_before_train=false",
                "trainer.save_every=0",
            ]
            rlrm(
                "train", "--profile", "tiny-genrm", "--out", str(run), *[a for s in sets for a in ("--set", s)], env=env
            )
            throttled = len(api.throttled)
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        measured = mean_step(rows)
        sim = work / f"sim-{mode}"
        rlrm("bench", "simulate", "--from", str(run), "--out", str(sim), "--set", f"modes=[{mode}]", env=env)
        predicted = _predicted(sim, mode)
        calls = rows[-1].get("reward/model_calls", "?")
        print(
            f"| {mode} | {calls} | {measured:.3f} | {predicted:.3f} | {predicted / measured - 1:+.1%} | {throttled} |"
        )


def _predicted(sim: Path, mode: str) -> float:
    import pandas as pd

    frame = pd.read_csv(sim / "results.csv")
    row = frame[(frame["mode"] == mode) & (frame["latency"].astype(str) != "none")]
    if row.empty:
        row = frame[frame["mode"] == mode]
    return float(row["step_time_mean"].iloc[0])


if __name__ == "__main__":
    main()
