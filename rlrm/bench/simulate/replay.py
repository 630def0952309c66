"""The reward latencies a benchmark's runs drew, to simulate its modes on the same ones.

    first = injected_latencies(bench / "runs" / "sync-r0", steps=40, width=256, timeout_s=30.0)   # [40, 256] s, or None

Every run of a benchmark repeat draws the same latency for the same sample (rlrm/engine/rewards/
inject.py seeds each draw with the repeat's seed and the sample's identity), and its trace records
each reward call's `injected_latency_s` with the batch and the sample's place in it. Under a heavy
tail one step's slowest sample moves it by seconds, so four measured repeats and five simulated
ones drawn apart can differ by more than the model errs; replayed, the prediction meets the same
input as the runs it is compared with, and none of their timings: the latencies are the workload.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def injected_latencies(run_dir: Path, steps: int, width: int, timeout_s: float) -> np.ndarray | None:
    """[steps, width] first-attempt injected latency of each sample of `run_dir`, or None when its
    trace does not record one for every sample (a run made before rlrm recorded them, a streamed mode
    that records groups, a run stopped early)."""
    path = Path(run_dir) / "trace.json"
    if not path.is_file():
        return None
    events = json.loads(path.read_text())
    events = events.get("traceEvents", []) if isinstance(events, dict) else events
    out = np.full((steps, width), np.nan)
    first_seen = np.full((steps, width), np.inf)
    for e in events:
        args = e.get("args") or {}
        if e.get("name") != "reward" or "sample" not in args:
            continue
        step, index = int(args.get("batch", 0)) - 1, int(args["sample"])
        if 0 <= step < steps and 0 <= index < width and e.get("ts", 0.0) < first_seen[step, index]:
            first_seen[step, index] = e.get("ts", 0.0)  # a retried sample: its first attempt
            latency, spent = float(args.get("injected_latency_s", np.nan)), float(e.get("dur", np.nan)) / 1e6
            # the span covers every attempt and names the last one's latency: a first attempt cut at
            # reward.attempt_timeout_s left `spent` over it (its latency is at least that: the simulator cuts it too)
            out[step, index] = spent if spent - latency >= timeout_s or np.isnan(latency) else latency
    return None if np.isnan(out).any() else out
