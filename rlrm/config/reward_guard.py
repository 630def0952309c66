"""reward.guard: the live reward-hacking check and the canaries (rlrm/engine/metrics/guard.py, rlrm/engine/canaries.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rlrm.config.section import Section


class GuardConfig(Section):
    """The reward-hacking guard: the audit `rlrm report` runs after the fact (rlrm/engine/metrics/audit.py's
    divergence check), run live on the last `window` steps after each step; and canaries, known items scored
    through the run's reward path every `canary_every` steps (rlrm/engine/canaries.py)."""

    on_divergence: Literal["off", "warn", "stop"] = Field(
        "warn",
        description="When the reward rises (t >= 2) while reward/rule_agreement or val/accuracy falls by at least "
        "min_drop (t <= -2) over the last `window` steps, on `confirm_steps` steps in a row: warn (a line and guard/divergence=1 in metrics.jsonl), "
        "stop (also end the run after that step with one line naming the step and the numbers; the last checkpoint "
        "stays), or off. It reads metrics the run writes anyway: no reward call.",
    )
    window: int = Field(
        20, ge=3, description="Steps the live check fits its trends over (it judges only once a run has that many)."
    )
    confirm_steps: int = Field(
        3,
        ge=1,
        description="Steps in a row the divergence must show before the guard acts: a check after every step over "
        "overlapping windows flagged 28 of 200 simulated healthy 100-step runs at 1, 5 at 3 (real divergences "
        "found 3 steps later: benchmarks/guard_false_alarms.py).",
    )
    min_drop: float = Field(
        0.05, gt=0.0, le=1.0, description="Fall of rule agreement or held-out accuracy over the window that counts."
    )
    on_canary: Literal["off", "warn", "stop"] = Field(
        "off",
        description="Canaries: before training and every `canary_every` steps, score the worked reference solutions "
        "of `canaries` held-out problems (must be rewarded) and five attacks on each (':', 'Solution', empty, the "
        "working cut before its answer, a wrong final answer: must not be) through the run's reward path, outside "
        "the batch and its statistics. A flip (a reference not rewarded, an attack rewarded) or a mean score drift "
        "from the first check above max_canary_drift: warn (a line, guard/canary_flips and guard/canary_drift in "
        "metrics.jsonl), stop (also end the run before the next update, naming the canaries), or off. Needs held-out "
        "data with worked solutions ('#### N' at the end; with reward.rule=math a \\boxed{...} answer).",
    )
    canary_every: int = Field(10, ge=1, description="Steps between canary checks (the first is before step 1).")
    canaries: int = Field(
        2, ge=1, description="Held-out problems the canaries are made of: 6 items (6 reward calls) each per check."
    )
    max_canary_drift: float = Field(
        0.2,
        gt=0.0,
        description="Largest mean absolute change of the canaries' scores from their first check (in score units: "
        "a GenRM's normalised verdict, a DisRM's logit) before it counts as drift.",
    )

    @field_validator("on_divergence", "on_canary", mode="before")
    @classmethod
    def _off_is_off(cls, value: object) -> object:
        return "off" if value is False else value  # YAML reads a bare `off` (in a profile or --set) as false
