"""Synthetic run, benchmark and parity folders in the formats rlrm writes, for tests and the
render benchmark (benchmarks/report_render.py). Deterministic for a given seed.

    write_run(tmp / "a", steps=50, mode="stream")
    write_bench(tmp / "bench", modes=("sync", "stream"), repeats=2, steps=6)
    write_parity(tmp / "parity", groups=20, n=4, train_steps=10)
"""

from __future__ import annotations

import json
from pathlib import Path

TRAINER_PHASES = (("adv", 0.01), ("old_log_prob", 0.2), ("update_actor", 0.8), ("update_weights", 0.01))


def run_rows(steps: int, seed: int = 0, gen_s: float = 0.4, reward_s: float = 0.1, val_every: int = 10) -> list[dict]:
    """Metrics rows shaped like the trainer's: a val-only step 0, then one row per step."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = [{"step": 0, "val/accuracy": 0.2, "val/format_rate": 1.0}]
    wall = 0.0
    for step in range(1, steps + 1):
        progress = step / max(steps, 1)
        score = float(np.clip(0.2 + 0.5 * progress + rng.normal(0, 0.03), 0, 1))
        timing = {"gen": gen_s, "reward": reward_s, **dict(TRAINER_PHASES)}
        step_s = sum(timing.values())
        wall += step_s
        row = {
            "step": step,
            "critic/score/mean": score,
            "critic/score/min": 0.0,
            "critic/score/max": 1.0,
            "response_length/mean": 14.0 + rng.normal(0, 0.5),
            "response_length/min": 8,
            "response_length/max": 20,
            "actor/pg_loss": float(rng.normal(0, 0.01)),
            "actor/ppo_kl": abs(float(rng.normal(0, 1e-3))),
            "actor/entropy": 0.3 - 0.1 * progress,
            "actor/grad_norm": 0.3 + abs(float(rng.normal(0, 0.05))),
            "actor/lr": 1e-4,
            "batch/num_samples": 256,
            "perf/throughput": 7000.0 + rng.normal(0, 100),
            "perf/samples_per_s": 256 / step_s,
            "perf/time_per_step": step_s,
            "perf/wall_s": wall,
            "perf/total_num_tokens": 14000,
            "idle/trainer": (gen_s + reward_s) / step_s,
            "idle/rollout": 1 - gen_s / step_s,
            "idle/reward_wait": reward_s / step_s,
            "async/staleness_mean": 0.0,
            "async/staleness_max": 0,
            "reward/injected_latency_mean": reward_s,
            "reward/latency_p50": reward_s,
            **{f"timing_s/{name}": seconds for name, seconds in timing.items()},
            "timing_s/step": step_s,
        }
        if val_every and step % val_every == 0:
            row["val/accuracy"] = 0.2 + 0.4 * progress
        rows.append(row)
    return rows


def trace_events(rows: list[dict], samples_per_step: int = 4, seed: int = 0) -> list[dict]:
    """Chrome-trace events for metrics rows: waits and trainer phases, requests and reward calls."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lanes = {"trainer": 0, "gen_wait": 1, "reward_wait": 2, "generate": 3, "reward": 4}
    events = []

    def span(lane: str, name: str, start: float, dur: float, args: dict | None = None) -> None:
        event = {
            "name": name,
            "cat": lane,
            "ph": "X",
            "pid": 0,
            "tid": lanes[lane],
            "ts": start * 1e6,
            "dur": dur * 1e6,
        }
        if args:
            event["args"] = args
        events.append(event)

    for row in rows:
        if "perf/wall_s" not in row:
            continue
        t = row["perf/wall_s"] - row["perf/time_per_step"]
        gen, reward = row["timing_s/gen"], row["timing_s/reward"]
        span("gen_wait", "gen", t, gen)
        for j in range(samples_per_step):
            span("generate", "generate", t, gen * (0.5 + 0.5 * (j + 1) / samples_per_step), {"batch": row["step"]})
            latency = float(rng.exponential(reward))
            span(
                "reward", "reward", t + gen, min(latency, reward), {"batch": row["step"], "injected_latency_s": latency}
            )
        span("reward_wait", "reward", t + gen, reward)
        t += gen + reward
        for name, seconds in TRAINER_PHASES:
            span("trainer", name, t, seconds)
            t += seconds
    for lane, tid in lanes.items():
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": lane}})
    return events


def write_run(path: Path, steps: int = 20, mode: str = "sync", seed: int = 0, trace: bool = True, **kwargs) -> Path:
    """A run folder: config.yaml (trainer.mode), metrics.jsonl and trace.json."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    rows = run_rows(steps, seed=seed, **kwargs)
    (path / "config.yaml").write_text(f"trainer:\n  mode: {mode}\n  total_steps: {steps}\n", encoding="utf-8")
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    if trace:
        (path / "trace.json").write_text(json.dumps({"traceEvents": trace_events(rows, seed=seed)}), encoding="utf-8")
    return path


def bench_rows(modes=("sync", "stream", "one-step-off"), repeats: int = 2) -> list[dict]:
    """results.csv rows: a zero-latency sync baseline, then each mode under latency; distinct numbers."""
    rows = []
    for repeat in range(repeats):
        rows.append(_bench_row("sync", repeat, "none", 1000.0 + repeat * 10, 1.0))
    for m, mode in enumerate(modes):
        for repeat in range(repeats):
            speedup = 1.0 + 0.5 * m + 0.1 * repeat
            rows.append(_bench_row(mode, repeat, "exp:1.0", 500.0 * speedup, speedup))
    return rows


def _bench_row(mode: str, repeat: int, latency: str, tokens_per_s: float, speedup: float) -> dict:
    slug = f"sync-nolatency-r{repeat}" if latency == "none" else f"{mode}-r{repeat}"  # as rlrm bench names them
    return {
        "mode": mode,
        "repeat": repeat,
        "latency": latency,
        "run_dir": f"runs/{slug}",
        "tokens_per_s": tokens_per_s,
        "samples_per_s": tokens_per_s / 50,
        "step_time_p50": 2.0 / speedup,
        "step_time_p90": 2.5 / speedup,
        "idle_trainer": round(0.5 / speedup, 4),
        "idle_rollout": round(0.6 / speedup, 4),
        "idle_reward_wait": round(0.3 / speedup, 4),
        "staleness_mean": 0.0,
        "staleness_max": 0,
        "final_reward": 0.5,
        "val_accuracy": 0.4,
        "speedup_vs_sync": speedup,
        "hiding_efficiency": round(1.0 - 1.0 / speedup, 4),
    }


def write_bench(path: Path, modes=("sync", "stream", "one-step-off"), repeats: int = 2, steps: int = 6) -> Path:
    """A benchmark folder: results.csv, summary.json and one run folder per row."""
    import pandas as pd

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    rows = bench_rows(modes, repeats)
    pd.DataFrame(rows).to_csv(path / "results.csv", index=False)
    for i, row in enumerate(rows):
        reward_s = 0.0 if row["latency"] == "none" else 0.5
        write_run(path / row["run_dir"], steps=steps, mode=row["mode"], seed=i, reward_s=reward_s)
    frame = pd.DataFrame(rows[repeats:])
    summary = {
        "profile": "tiny-rule",
        "latency": "exp:1.0",
        "latency_scale": 1.0,
        "mean_latency_s": 1.0,
        "steps": steps,
        "repeats": repeats,
        "seed": 0,
        "baseline": rows[0],
        "modes": {
            mode: part.drop(columns=["mode", "latency", "run_dir"]).mean().to_dict()
            for mode, part in frame.groupby("mode")
        },
        "missing": [],
    }
    (path / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return path


def write_parity(
    path: Path, groups: int = 20, n: int = 4, train_steps: int = 0, seed: int = 0, noise: float = 0.2
) -> Path:
    """A parity folder: scores.parquet, summary.json and optionally train/{legacy,loop} run folders."""
    import numpy as np
    import pandas as pd

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    legacy = rng.normal(0, 1, groups * n)
    loop = legacy + rng.normal(0, noise, groups * n)  # enough noise that some groups flip rankings
    group_id = np.repeat(np.arange(groups), n)
    scores = pd.DataFrame(
        {
            "sample_id": np.arange(groups * n),
            "group_id": group_id,
            "legacy_score": legacy,
            "loop_score": loop,
            "abs_diff": np.abs(loop - legacy),
            "rel_diff": np.abs(loop - legacy) / (np.abs(legacy) + 1e-6),
            "legacy_adv": legacy,
            "loop_adv": loop,
            "truncated": False,
        }
    )
    scores.to_parquet(path / "scores.parquet")
    summary = {
        "max_abs_diff": float(scores["abs_diff"].max()),
        "mean_abs_diff": float(scores["abs_diff"].mean()),
        "pearson": float(np.corrcoef(legacy, loop)[0, 1]),
        "verdict": "pass",
        "legacy_dtype": "bfloat16",
        "loop_dtype": "float32",
    }
    (path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    if train_steps:
        write_run(path / "train" / "legacy", steps=train_steps, seed=seed, trace=False)
        write_run(path / "train" / "loop", steps=train_steps, seed=seed + 1, trace=False)
    return path
