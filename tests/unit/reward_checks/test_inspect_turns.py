"""`rlrm inspect reward` on multi-turn rows: bad turns named, and what the DisRM and the judge see."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from rlrm.cli.main import app

runner = CliRunner()


QUESTION = "What is 12+34?"


RESPONSE = "Sum: <call>calculator 12+34</call><obs>46</obs>#### 46"


TURNS = [
    {
        "role": "assistant",
        "text": "Sum: <call>calculator 12+34</call>",
        "tool_call": {"name": "calculator", "arguments": "12+34"},
    },
    {"role": "tool", "name": "calculator", "text": "46"},
    {"role": "assistant", "text": "#### 46"},
]


SHOWN = (
    "assistant (turn 1): Sum: <call>calculator 12+34</call>\ntool calculator (12+34): 46\nassistant (turn 2): #### 46"
)


def rows(tmp_path, **row):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"prompt": QUESTION, "response": RESPONSE, "ground_truth": "46", **row}) + "\n")
    return path


def test_bad_turns_in_the_input_are_named(tmp_path):
    result = runner.invoke(
        app,
        ["inspect", "reward", "--profile", "tiny-rule", "--input", str(rows(tmp_path, turns=[{"role": "user"}]))],
    )
    assert result.exit_code == 2 and "row 1: turns[0] must be a dict with role 'assistant' or 'tool'" in result.output


def test_the_disrm_and_the_judge_see_the_trajectory(tmp_path, tiny_policy_path):
    """What inspect shows for a DisRM (its rendering) and a judge (the prompt as sent), without serving either."""
    from transformers import AutoTokenizer

    from rlrm.config.loader import load_profile
    from rlrm.engine.rewards.genrm import judge_messages
    from rlrm.reward_checks.details import disrm_detail, genrm_detail
    from rlrm.reward_checks.samples import read_inspect_file

    tokenizer = AutoTokenizer.from_pretrained(tiny_policy_path)
    (sample,) = read_inspect_file(rows(tmp_path, turns=TURNS))
    disrm = disrm_detail(sample, None, tokenizer, load_profile("tiny-disrm", []).reward)
    # the DisRM scores the whole response, observation included, as one assistant message
    assert disrm["rendered_text"].endswith(f"<|im_start|>assistant\n{RESPONSE}<|im_end|>\n")
    template = "Problem: {question}\nSteps:\n{turns}\nReference: {reference}\nAnswer: {response}"
    cfg = load_profile("tiny-genrm", [f"reward.genrm.template={template}"]).reward
    exchange = {"request": {"messages": judge_messages(cfg.genrm.template, sample)}}
    judge = genrm_detail(exchange, tokenizer, cfg)
    assert f"Steps:\n{SHOWN}\nReference: 46\nAnswer: {RESPONSE}" in judge["judge_messages"][0]["content"]
    assert SHOWN in judge["judge_prompt_text"]


def test_input_turns_give_the_reward_trainings_extra_info(tmp_path):
    """A row's turns give the keys the agent loop gives in training (rlrm/engine/agent/loop.py): each tool call
    with its `result` (docs/agentic.md), the calling turn with its `tool_result`; the row's dicts are not changed."""
    from rlrm.reward_checks.samples import read_inspect_file

    turns = [
        {**TURNS[0], "tool_reward": 0.5},
        TURNS[1],
        {"role": "assistant", "text": "<call>lookup x</call>", "tool_call": {"name": "lookup", "arguments": "x"}},
    ]  # the last call never ran (the budget ran out): no result, as in training
    (sample,) = read_inspect_file(rows(tmp_path, turns=turns))
    info = sample.extra_info
    assert info["tool_calls"] == [
        {"name": "calculator", "arguments": "12+34", "result": "46"},
        {"name": "lookup", "arguments": "x", "result": None},
    ]
    assert info["num_turns"] == 4 and info["tool_rewards"] == [0.5]
    assert info["turns"][0]["tool_result"] == "46" and "tool_result" not in info["turns"][2]
    assert info["turns"][1] == TURNS[1]
    assert "tool_result" not in TURNS[0] and "result" not in TURNS[0]["tool_call"]  # copies: TURNS is untouched


def test_a_tool_call_that_is_no_dict_is_named(tmp_path):
    bad = [{"role": "assistant", "text": "<call>calculator 1+1</call>", "tool_call": "calculator 1+1"}]
    result = runner.invoke(
        app, ["inspect", "reward", "--profile", "tiny-rule", "--input", str(rows(tmp_path, turns=bad))]
    )
    assert result.exit_code == 2 and "row 1: turns[0].tool_call must be a dict of name and arguments" in result.output


def test_a_null_tool_call_is_a_turn_without_a_call(tmp_path):
    """JSON exporters write "tool_call": null on a turn that calls nothing: as training, no call (was a TypeError)."""
    from rlrm.reward_checks.samples import read_inspect_file

    row = {
        "prompt": "what is 2+2?",
        "response": "4",
        "turns": [
            {"role": "assistant", "text": "<call>x</call>", "tool_call": {"name": "calculator", "arguments": "2+2"}},
            {"role": "tool", "name": "calculator", "text": "4"},
            {"role": "assistant", "text": "4", "tool_call": None},
        ],
    }
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (sample,) = read_inspect_file(path)
    assert sample.extra_info["tool_calls"] == [{"name": "calculator", "arguments": "2+2", "result": "4"}]
