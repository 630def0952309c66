"""reward.rubric: K criteria asked of a judge per sample (reward.kind=rubric), each its own reward component."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rlrm.config.judge_template import check_template_fields
from rlrm.config.section import Section

RUBRIC_PREFIX = (
    "Is the answer to this problem correct?\nProblem: {question}\nAnswer: {response}\nReference answer: {reference}\n"
)


class RubricCriterion(Section):
    """One criterion of a rubric: a question put to the judge after the sample's prefix, its weight and parser."""

    name: str = Field(
        ..., pattern=r"^[A-Za-z0-9_.-]+$", description="Component name (reward/component/<name>/* in metrics)."
    )
    question: str = Field(
        ...,
        min_length=1,
        description="What the judge is asked, put last in its prompt after reward.rubric.prefix; it should say how "
        "to end (e.g. \"... end with 'Score: 10' if it does or 'Score: 0' if it does not.\").",
    )
    weight: float = Field(..., description="Weight of this criterion's score in the reward (finite; 0 logs it only).")
    verdict: Literal["score", "boxed"] = Field(
        "score", description="Parse 'Score: N' or '\\boxed{N}' (the last one, after a reasoning judge's last </think>)."
    )
    max_score: float = Field(10.0, gt=0, description="The verdict that means fully met (scores are divided by it).")


class RubricConfig(Section):
    """reward.kind=rubric: K criteria asked of the judge per sample, each scored on its own (a reward component);
    the reward is their weighted sum. The K prompts of a sample share `prefix` (question, response, reference):
    only the criterion, last, differs, so a prefix-caching engine reads the sample once."""

    prefix: str = Field(
        RUBRIC_PREFIX,
        description="The part of every criterion's prompt that comes first, with {question}, {response} and "
        "optionally {reference} and {turns}; the criterion's question is appended to it.",
    )
    criteria: list[RubricCriterion] = Field(
        default_factory=list,
        description="The criteria, at least one, each {name, question, weight, verdict, max_score}: name: the "
        "component's name (letters, digits, _ . -; unique); question: put last in the judge's prompt; weight: a "
        "finite number; verdict: score ('Score: N', default) or boxed ('\\boxed{N}'); max_score: the verdict "
        "that means fully met (default 10).",
    )

    @field_validator("criteria")
    @classmethod
    def _names_unique(cls, criteria: list[RubricCriterion]) -> list[RubricCriterion]:
        names = [c.name for c in criteria]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(
                f"the criterion name(s) {', '.join(repeated)} appear more than once; give each criterion its own name"
            )
        return criteria

    @property
    def weights(self) -> dict[str, float]:
        return {c.name: c.weight for c in self.criteria}


def check_rubric(rubric: RubricConfig, component_weights: dict[str, float]) -> None:
    """A rubric with criteria, a prefix the judge can be given, and its weights in one place."""
    if not rubric.criteria:
        raise ValueError(
            "reward.kind=rubric needs reward.rubric.criteria (at least one {name, question, weight}); "
            "for a single judge question use reward.kind=genrm"
        )
    try:
        check_template_fields(rubric.prefix)
    except ValueError as exc:
        raise ValueError(str(exc).replace("genrm.template", "reward.rubric.prefix")) from None
    if component_weights:
        raise ValueError(
            "reward.component_weights: a rubric's component weights are its criteria's (reward.rubric.criteria[].weight); "
            "leave component_weights empty"
        )
