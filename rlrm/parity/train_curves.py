"""Training-curve parity: the same run twice, rewards from the legacy in-trainer DisRM and from the
reward loop's served DisRM, and how far their reward curves drift apart.

    summary = train_parity(profile, model_path, steps=20, legacy_dtype="bf16", loop_dtype="fp32",
                           world_size=1, max_length=512, out=Path("parity/train"), device="cuda")

Both runs start from the same seed, prompts and policy; they differ only in the scoring path
(`reward.disrm.scorer`), so any gap in `critic/score/mean` is the scorers' doing, amplified by
training on it. Writes `train/legacy/` and `train/loop/` run folders (for `rlrm report`).
"""

from __future__ import annotations

import math
from pathlib import Path

from rlrm.config.loader import parse_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train

LOOP_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def train_parity(
    profile,
    model_path: str,
    steps: int,
    legacy_dtype: str,
    loop_dtype: str,
    world_size: int,
    max_length: int,
    out: Path,
    device: str = "cpu",
) -> dict:
    """Run both trainings into `out/legacy` and `out/loop`; return the curve comparison."""
    base = profile.model_dump(mode="json")
    runs = {}
    rewards: tuple[tuple[str, dict[str, dict[str, object]]], ...] = (
        (
            "legacy",
            {
                "disrm": {
                    "scorer": "legacy",
                    "legacy_dtype": legacy_dtype,
                    "legacy_world_size": world_size,
                    "legacy_device": device,
                }
            },
        ),
        ("loop", {"disrm": {"scorer": "served"}, "server": {"dtype": LOOP_DTYPES[loop_dtype]}}),
    )
    for name, reward in rewards:
        reward["disrm"]["max_length"] = max_length
        run_profile = _with(base, steps, model_path, reward)
        run_dir = start_run(run_profile, Path(out) / name, overwrite=True)
        result = train(run_dir, console="none")
        if result.interrupted:
            raise KeyboardInterrupt
        runs[name] = read_metrics(run_dir / "metrics.jsonl")
    return compare_curves(runs["legacy"], runs["loop"])


def compare_curves(legacy_rows: list[dict], loop_rows: list[dict], key: str = "critic/score/mean") -> dict:
    """Per-step difference of `key` (legacy - loop), its mean/max magnitude and its linear trend."""
    legacy = {r["step"]: r[key] for r in legacy_rows if _finite(r.get(key))}  # a non-finite score reads back null
    loop = {r["step"]: r[key] for r in loop_rows if _finite(r.get(key))}
    steps = sorted(set(legacy) & set(loop))
    diffs = [legacy[s] - loop[s] for s in steps]
    if not diffs:
        raise ValueError(f"the two runs share no step with {key}")
    slope = _slope(steps, [abs(d) for d in diffs])
    final = {
        name: next((r["val/accuracy"] for r in reversed(rows) if "val/accuracy" in r), None)
        for name, rows in (("legacy", legacy_rows), ("loop", loop_rows))
    }
    return {
        "metric": key,
        "steps": steps,
        "legacy": [legacy[s] for s in steps],
        "loop": [loop[s] for s in steps],
        "diff": diffs,
        "mean_abs_diff": sum(abs(d) for d in diffs) / len(diffs),
        "max_abs_diff": max(abs(d) for d in diffs),
        "abs_diff_slope_per_step": slope,
        "val_accuracy": final,
    }


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (0 for a single point)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0


def _with(base: dict, steps: int, model_path: str, reward: dict):
    import copy

    raw = copy.deepcopy(base)
    raw["trainer"].update(total_steps=steps, save_every=0, mode="sync")
    raw["reward"]["kind"] = "disrm"
    raw["reward"]["server"]["model"] = model_path
    for section, values in reward.items():
        raw["reward"][section].update(values)
    return parse_profile(raw, source="parity --train-steps")


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
