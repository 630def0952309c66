"""The reward failure budget: a run whose rewards mostly fail stops, instead of training on
default scores and ending "successfully".

    loop.check_budget(step, reward_metrics, dropped_groups)            # in each mode, before the update
    check_failure_budget(step, row, profile.reward, loop.last_error, trained=True)  # after the step (pipeline)

A step is over budget when more than `reward.max_failure_rate` of the samples scored in it
failed after every retry (whether `on_failure` defaulted them or dropped their groups). The
error counts the failure kinds and shows the last error, so a dead server reads as one. The check
runs before the step's update, so an over-budget step is never trained nor checkpointed: the last
checkpoint stays the last good step and `--resume` continues from it.
"""

from __future__ import annotations

import re

from rlrm.config.reward import RewardConfig
from rlrm.errors import TrainingError

# Per-attempt counters of the reward loop, named as a user reads them.
_ATTEMPT_KINDS = (
    ("reward/timeouts", "timeouts"),
    ("reward/injected_failures", "injected"),
    ("reward/unparsed", "unparsed verdicts"),
    ("reward/nonfinite", "non-finite scores"),
    ("reward/component_errors", "component errors"),
    ("reward/turn_score_errors", "turn score errors"),
)
_MAX_ERROR_CHARS = 300


class RewardBudgetExceeded(TrainingError):
    """Too many of a step's reward samples failed (reward.max_failure_rate).

    `trained`: the actor already holds (part of) the step's update, so it must not be checkpointed.
    """

    trained: bool = False


def check_failure_budget(
    step: int, row: dict, cfg: RewardConfig, last_error: str | None, trained: bool = False
) -> None:
    """Raise RewardBudgetExceeded when the step's failed share of samples is over `cfg.max_failure_rate`.

    Args:
        step: the step the row belongs to.
        row: the step's metrics (`reward/samples`, `reward/failures` and the per-kind counters).
        cfg: the profile's reward section.
        last_error: the reward loop's last sample error, shown as it was.
        trained: whether the step's update (or part of it) already ran (RewardBudgetExceeded.trained).
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
    exceeded = RewardBudgetExceeded(
        f"step {step}: {failed} of {samples} reward samples failed ({failed / samples:.0%}, over "
        f"reward.max_failure_rate={cfg.max_failure_rate:g}; reward.max_retries={cfg.max_retries}): {', '.join(outcome)}; "
        f"{', '.join(kinds)}; last error: {error}. Fix {_what_to_fix(cfg, row, error)} and continue with "
        "rlrm train --resume, or raise reward.max_failure_rate"
    )
    exceeded.trained = trained
    raise exceeded


def _what_to_fix(cfg: RewardConfig, row: dict, error: str = "") -> str:
    """What a user should look at: a local function has no servers to ask about; a judge that answers in another
    format than the one asked for (most failures unparsed verdicts) has servers that are up, as have servers that
    refused the request (a 4xx: a setting they do not take)."""
    if cfg.kind == "custom":
        return f"the reward function {cfg.custom.name} in {cfg.custom.path}"
    if cfg.kind == "rule":
        return "the reward rule or the data's ground truths"
    if 2 * row.get("reward/unparsed", 0) >= row.get("reward/failures", 0) > 0:
        return (
            "the judge's prompt or the verdict format asked of it (reward.genrm.template, reward.genrm.verdict: "
            "`rlrm inspect reward` shows its raw answers)"
        )
    if re.search(r"answered 4\d\d", error):
        return "what the reward servers refused in its requests (the last error names it)"
    return "the reward setup (are its servers up?)"
