"""What `rlrm train` says when a run ends: where held-out accuracy and the reward started and ended, failures,
cost, what the reward-hacking audit and the canaries saw, and the next command.

    for line in closing_lines(rows, run_dir):   # rows: metrics.jsonl as dicts (resumed parts included)
        print(line)
"""

from __future__ import annotations

import shlex
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
    if steps and _reward_kind(run_dir) == "disrm":  # a raw logit may fall while answers improve: say what it is
        lines.append(
            f"  reward (the DisRM's raw logit, not a rate) {values[0]:.3f} -> {values[-1]:.3f} ({REWARD}, step "
            f"{steps[0]:g} -> {steps[-1]:g}); agreement with the rule below says whether answers improved"
        )
    elif steps:
        # the first step with a score (a step whose groups were all dropped trained nothing and has none)
        lines.append(f"  reward {values[0]:.3f} -> {values[-1]:.3f} ({REWARD}, step {steps[0]:g} -> {steps[-1]:g})")
    steps, values = series.get(AGREEMENT, ([], []))
    if len(steps) >= 2:
        lines.append(f"  reward agrees with the rule {values[0]:.2f} -> {values[-1]:.2f} ({AGREEMENT})")
    samples = sum(r.get("reward/samples", 0) for r in rows)
    failures = sum(r.get("reward/failures", 0) for r in rows)
    if failures:
        lines.append(f"  reward failures {failures:g} of {samples:g} samples (reward/failures; see metrics.jsonl)")
    updated = [r for r in rows if "actor/nonfinite_skipped" in r]
    skipped = [r for r in updated if r["actor/nonfinite_skipped"]]
    if skipped:  # a reward too large for float32, a learning rate too high: those mini-batches changed nothing
        total = sum(int(r["actor/nonfinite_skipped"]) for r in skipped)
        lines.append(
            f"  warning: {total} mini-batch updates skipped for a non-finite loss or gradient in {len(skipped)} of "
            f"{len(updated)} steps (actor/nonfinite_skipped; under float16 a loss-scale overflow counts too); "
            "check the rewards (critic/score) and actor.lr"
        )
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
    guarded = [r["step"] for r in rows if r.get("guard/divergence") == 1]
    if guarded:  # the live guard's own window and min_drop: the audit below may not see the same
        lines.append(
            f"  warning: the reward-hacking guard flagged {len(guarded)} step(s), first step {guarded[0]:g} "
            "(guard/divergence; reward.guard.window and min_drop)"
        )
    for finding in audit_run(series):
        if finding.flagged:
            lines.append(f"  warning: reward-hacking audit: {finding.check}: {finding.detail}")
    lines += _canary_lines(rows)
    lines.append(f"  next: rlrm report {shlex.quote(str(run_dir))}")
    return lines


def _reward_kind(run_dir: Path) -> str | None:
    """reward.kind of the run's resolved profile (config.yaml), or None when it cannot be read."""
    import yaml

    try:
        profile = yaml.safe_load((Path(run_dir) / "config.yaml").read_text(encoding="utf-8"))
        return str(profile["reward"]["kind"])
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None


def _canary_lines(rows: list[dict]) -> list[str]:
    """The canaries' checks, flips, drift and what they cost in reward-model calls (reward.guard.on_canary)."""
    checks = [r for r in rows if "guard/canary_calls" in r]
    if not checks:
        return []
    calls = sum(r["guard/canary_calls"] for r in checks)
    run_calls = sum(r.get("reward/model_calls", 0) for r in rows)
    share = f" = {calls / (calls + run_calls):.1%} of all reward-model calls" if calls + run_calls else ""
    # no canary scored in both checks: NaN, read back from metrics.jsonl as null
    drifts = [d for d in (r.get("guard/canary_drift") for r in checks) if isinstance(d, (int, float)) and d == d]
    drift = f", drift up to {max(drifts):.3g}" if drifts else ""
    flipped = [r for r in checks if r["guard/canary_flips"] > 0]
    line = f"  reward canaries: {len(checks)} checks{drift}; {calls:g} canary calls{share} (guard/canary_*)"
    if not flipped:
        return [line]
    first = flipped[0]
    return [
        line,
        f"  warning: reward canaries flipped in {len(flipped)} of {len(checks)} checks, first after step "
        f"{first['step']:g} ({first['guard/canary_flips']:g} flips; the warnings above name them)",
    ]


_AUDITED = (REWARD, "val/accuracy", AGREEMENT, "response_length/mean", "reward/top1pct_share")
