"""What `rlrm train` says when a run ends: where held-out accuracy and the reward started and ended, failures,
cost, what the reward-hacking audit saw, and the next command.

    for line in closing_lines(rows, run_dir):   # rows: metrics.jsonl as dicts (resumed parts included)
        print(line)
"""

from __future__ import annotations

from pathlib import Path

from rlrm.engine.metrics.audit import AGREEMENT, REWARD, audit_run


def closing_lines(rows: list[dict], run_dir: Path) -> list[str]:
    """The lines after `done: ...`: each names its metric, start -> end over the run's rows."""
    lines = []
    accuracy = _series(rows, "val/accuracy")
    if len(accuracy[0]) >= 2:
        (first, last), (a, b) = (accuracy[0][0], accuracy[0][-1]), (accuracy[1][0], accuracy[1][-1])
        lines.append(f"  held-out accuracy {a:.3f} -> {b:.3f} (val/accuracy, step {first:g} -> {last:g})")
    reward = _series(rows, REWARD)
    if reward[0]:
        lines.append(f"  reward {reward[1][0]:.3f} -> {reward[1][-1]:.3f} ({REWARD}, step 1 -> {reward[0][-1]:g})")
    agreement = _series(rows, AGREEMENT)
    if len(agreement[0]) >= 2:
        lines.append(f"  reward agrees with the rule {agreement[1][0]:.2f} -> {agreement[1][-1]:.2f} ({AGREEMENT})")
    samples = sum(r.get("reward/samples", 0) for r in rows)
    failures = sum(r.get("reward/failures", 0) for r in rows)
    if failures:
        lines.append(f"  reward failures {failures:g} of {samples:g} samples (reward/failures; see metrics.jsonl)")
    cost = sum(r.get("reward/cost", 0.0) for r in rows)
    if cost:
        lines.append(f"  reward model cost {cost:.4f} (reward/cost)")
    flagged = [f for f in audit_run({k: _series(rows, k) for k in _AUDITED if _series(rows, k)[0]}) if f.flagged]
    for finding in flagged:
        lines.append(f"  warning: reward-hacking audit: {finding.check}: {finding.detail}")
    lines.append(f"  next: rlrm report {run_dir}")
    return lines


_AUDITED = (REWARD, "val/accuracy", AGREEMENT, "response_length/mean", "reward/top1pct_share")


def _series(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    points = [(float(r["step"]), float(r[key])) for r in rows if isinstance(r.get(key), (int, float))]
    return [s for s, _ in points], [v for _, v in points]
