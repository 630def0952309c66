"""The judge template's {turns} field: a trajectory's turns, tool calls and observations, one per line;
unknown fields are refused when the profile is read."""

from __future__ import annotations

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.genrm import judge_prompt
from rlrm.errors import ConfigError

TURNS = [
    {
        "role": "assistant",
        "text": "Sum: <call>calculator 12+34</call>",
        "tool_call": {"name": "calculator", "arguments": "12+34"},
    },
    {"role": "tool", "name": "calculator", "text": "46"},
    {"role": "assistant", "text": "<call></call>"},
    {"role": "tool", "name": None, "text": "error: malformed tool call"},
    {"role": "assistant", "text": "#### 46"},
]


def sample(extra_info) -> RewardSample:
    whole = "Sum: <call>calculator 12+34</call><obs>46</obs>#### 46"
    return RewardSample("p0", 0, "test", [{"role": "user", "content": "What is 12+34?"}], whole, "46", extra_info)


def test_turns_render_each_turn_call_and_observation_in_order():
    text = judge_prompt("Q: {question}\nTrajectory:\n{turns}\nFinal: {response}", sample({"turns": TURNS}))
    assert text == (
        "Q: What is 12+34?\nTrajectory:\n"
        "assistant (turn 1): Sum: <call>calculator 12+34</call>\n"
        "tool calculator (12+34): 46\n"
        "assistant (turn 2): <call></call>\n"
        "tool (malformed call): error: malformed tool call\n"
        "assistant (turn 3): #### 46\n"
        "Final: Sum: <call>calculator 12+34</call><obs>46</obs>#### 46"
    )


def test_a_single_turn_sample_is_one_assistant_turn():
    assert judge_prompt("{turns}|{response}", sample({})) == (
        "assistant (turn 1): Sum: <call>calculator 12+34</call><obs>46</obs>#### 46|"
        "Sum: <call>calculator 12+34</call><obs>46</obs>#### 46"
    )


@pytest.mark.parametrize(
    "template, said",
    [
        ("{response} {trajectory}", "unknown field(s) {trajectory}"),
        ("{response} {}", "unknown field(s) {}"),
        ("{response} {turns", "cannot be filled in"),
    ],
)
def test_unknown_template_fields_are_refused_in_one_line(template, said):
    with pytest.raises(ConfigError) as caught:
        load_profile("tiny-genrm", [f"reward.genrm.template={template}"])
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_known_fields_and_literal_braces_are_accepted():
    profile = load_profile("tiny-genrm", ["reward.genrm.template={{json}} {question} {turns} {response} {reference}"])
    assert "{turns}" in profile.reward.genrm.template
