"""What `rlrm train` says when a run ends: where held-out accuracy and the reward started and ended, failures,
cost, what the reward-hacking audit saw, and the next command.

    for line in closing_lines(rows, run_dir):   # rows: metrics.jsonl as dicts (resumed parts included)
        print(line)
"""

from __future__ import annotations

from pathlib import Path

from rlrm.engine.metrics.audit import AGREEMENT, REWARD, audit_run, row_series
from rlrm.engine.run_contract import CONTRACT_FILE, contract_summary


def closing_lines(rows: list[dict], run_dir: Path) -> list[str]:
    """The lines after `done: ...`: each names its metric, start -> end over the run's rows."""
    series = row_series(rows, _AUDITED)
    lines = []
    steps, values = series.get("val/accuracy", ([], []))
    if len(steps) >= 2:
        lines.append(
            f"  held-out accuracy {values[0]:.3f} -> {values[-1]:.3f} (val/accuracy, step {steps[0]:g} -> {steps[-1]:g})"
        )
    steps, values = series.get(REWARD, ([], []))
    if steps:
        lines.append(f"  reward {values[0]:.3f} -> {values[-1]:.3f} ({REWARD}, step 1 -> {steps[-1]:g})")
    steps, values = series.get(AGREEMENT, ([], []))
    if len(steps) >= 2:
        lines.append(f"  reward agrees with the rule {values[0]:.2f} -> {values[-1]:.2f} ({AGREEMENT})")
    samples = sum(r.get("reward/samples", 0) for r in rows)
    failures = sum(r.get("reward/failures", 0) for r in rows)
    if failures:
        lines.append(f"  reward failures {failures:g} of {samples:g} samples (reward/failures; see metrics.jsonl)")
    cost = sum(r.get("reward/cost", 0.0) for r in rows)
    if cost:
        lines.append(f"  reward model cost {cost:.4f} (reward/cost)")
    hits = sum(r.get("reward/cache_hits", 0) for r in rows)
    if any("reward/cache_hits" in r for r in rows):
        saved = sum(r.get("reward/cache_saved_model_calls", 0) for r in rows)
        lines.append(
            f"  reward cache: {hits:g} of {samples:g} samples from the cache, {saved:g} reward-model calls saved "
            "(reward/cache_hits, reward/cache_saved_model_calls)"
        )
    contract = contract_summary(run_dir)
    if contract is not None:
        lines.append(f"  reward contract {contract} ({CONTRACT_FILE})")
    for finding in audit_run(series):
        if finding.flagged:
            lines.append(f"  warning: reward-hacking audit: {finding.check}: {finding.detail}")
    lines.append(f"  next: rlrm report {run_dir}")
    return lines


_AUDITED = (REWARD, "val/accuracy", AGREEMENT, "response_length/mean", "reward/top1pct_share")
