"""The reward failure budget: a run whose rewards mostly fail stops, instead of training on
default scores and ending "successfully".

    check_failure_budget(step, row, profile.reward, loop.last_error)   # after each step's metrics row

A step is over budget when more than `reward.max_failure_rate` of the samples scored in it
failed after every retry (whether `on_failure` defaulted them or dropped their groups). The
error counts the failure kinds and shows the last error, so a dead server reads as one.
"""

from __future__ import annotations

from rlrm.config.reward import RewardConfig
from rlrm.errors import TrainingError

# Per-attempt counters of the reward loop, named as a user reads them.
_ATTEMPT_KINDS = (
    ("reward/timeouts", "timeouts"),
    ("reward/injected_failures", "injected"),
    ("reward/unparsed", "unparsed verdicts"),
    ("reward/nonfinite", "non-finite scores"),
)
_MAX_ERROR_CHARS = 300


class RewardBudgetExceeded(TrainingError):
    """Too many of a step's reward samples failed (reward.max_failure_rate)."""


def check_failure_budget(step: int, row: dict, cfg: RewardConfig, last_error: str | None) -> None:
    """Raise RewardBudgetExceeded when the step's failed share of samples is over `cfg.max_failure_rate`.

    Args:
        step: the step the row belongs to.
        row: the step's metrics (`reward/samples`, `reward/failures` and the per-kind counters).
        cfg: the profile's reward section.
        last_error: the reward loop's last sample error, shown as it was.
    """
    samples, failed = row.get("reward/samples", 0), row.get("reward/failures", 0)
    if not samples or failed / samples <= cfg.max_failure_rate:
        return
    outcome = [f"{row.get('reward/defaulted', 0)} defaulted", f"{row.get('reward/dropped_groups', 0)} groups dropped"]
    kinds = [f"{name} {int(row[key])}" for key, name in _ATTEMPT_KINDS if row.get(key)]
    kinds.append(f"retries {int(row.get('reward/retries', 0))}")
    error = " ".join((last_error or "none recorded").split())  # one line, whatever the server sent
    if len(error) > _MAX_ERROR_CHARS:
        error = error[: _MAX_ERROR_CHARS - 3] + "..."
    raise RewardBudgetExceeded(
        f"step {step}: {failed} of {samples} reward samples failed after {cfg.max_retries} retries "
        f"({failed / samples:.0%}, over reward.max_failure_rate={cfg.max_failure_rate:g}): {', '.join(outcome)}; "
        f"{', '.join(kinds)}; last error: {error}. Fix the reward setup (are its servers up?) and continue with "
        "rlrm train --resume, or raise reward.max_failure_rate"
    )
