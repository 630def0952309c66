"""A profile for MATH data: reward.rule=math with data.source=math, the boxed instruction, what is refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rlrm.config.schema import MATH_PROMPT_SUFFIX, PROMPT_SUFFIX, Profile


def test_the_math_rule_asks_for_a_box_unless_the_suffix_is_set():
    assert Profile.model_validate({}).data.prompt_suffix == PROMPT_SUFFIX
    boxed = Profile.model_validate({"reward": {"rule": "math"}})
    assert boxed.data.prompt_suffix == MATH_PROMPT_SUFFIX and "\\boxed{}" in MATH_PROMPT_SUFFIX
    own = Profile.model_validate({"reward": {"rule": "math"}, "data": {"prompt_suffix": "Answer in a box."}})
    assert own.data.prompt_suffix == "Answer in a box."
    # the resolved profile (config.yaml) reads back the same
    again = Profile.model_validate(boxed.model_dump())
    assert again.data.prompt_suffix == MATH_PROMPT_SUFFIX


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"data": {"source": "math", "path": "d"}}, "set reward.rule=math"),
        ({"data": {"source": "math"}, "reward": {"rule": "math"}}, "data.source=math needs data.path"),
    ],
)
def test_what_a_math_profile_refuses(raw, message):
    with pytest.raises(ValidationError, match=message):
        Profile.model_validate(raw)


def test_a_math_profile():
    profile = Profile.model_validate({"data": {"source": "math", "path": "d"}, "reward": {"rule": "math"}})
    assert profile.data.source == "math" and profile.reward.rule == "math"
