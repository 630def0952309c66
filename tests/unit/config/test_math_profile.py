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


def test_a_saved_profile_whose_instruction_the_rule_cannot_read_is_refused(tmp_path):
    # `rlrm profiles show tiny-rule > mine.yaml` (or a run's config.yaml) holds GSM8K's instruction: switched to the
    # MATH rule it asked for `#### N`, which the rule never reads, and every reward was 0 without a word
    from rlrm.config.loader import dump_profile, load_profile
    from rlrm.errors import ConfigError

    saved = tmp_path / "mine.yaml"
    saved.write_text(dump_profile(load_profile("tiny-rule")))
    with pytest.raises(ConfigError, match=r"data.prompt_suffix asks for the answer as reward.rule=gsm8k reads it, "
                       r"but reward.rule=math: .*within \\\\boxed"):  # fmt: skip
        load_profile(str(saved), ["reward.rule=math"])
    math = load_profile("tiny-rule", ["reward.rule=math"])
    assert load_profile(str(saved), ["reward.rule=math", f"data.prompt_suffix={MATH_PROMPT_SUFFIX}"]) == math
    saved.write_text(dump_profile(math))
    with pytest.raises(ConfigError, match="reward.rule=math reads it, but reward.rule=gsm8k"):
        load_profile(str(saved), ["reward.rule=gsm8k"])


def test_an_instruction_the_training_reward_reads_is_kept():
    # a run of yesterday's rlrm: tiny-rule with the boxed instruction and gsm8k's flexible method, which reads the
    # last number, a boxed one too; it trained, and its resume was refused
    from rlrm.config.loader import load_profile

    flexible = load_profile("tiny-rule", ["reward.method=flexible", f"data.prompt_suffix={MATH_PROMPT_SUFFIX}"])
    assert flexible.data.prompt_suffix == MATH_PROMPT_SUFFIX
    judge = load_profile("tiny-genrm", [f"data.prompt_suffix={MATH_PROMPT_SUFFIX}"])  # the judge reads what it reads
    assert judge.reward.rule == "gsm8k"


def test_a_model_reward_whose_checks_cannot_read_the_answers_is_told(capsys):
    # a judge trained on boxed answers under reward.rule=gsm8k (strict): val/accuracy and rule agreement read nothing
    from rlrm.config.loader import load_profile
    from rlrm.engine.run_checks import note_unread_answers

    note_unread_answers(load_profile("tiny-genrm", [f"data.prompt_suffix={MATH_PROMPT_SUFFIX}"]))
    said = capsys.readouterr().err
    assert said.startswith("note: data.prompt_suffix asks for the answer as reward.rule=math reads it, but ")
    assert "set reward.rule=math" in said
    note_unread_answers(load_profile("tiny-genrm"))
    assert capsys.readouterr().err == ""
