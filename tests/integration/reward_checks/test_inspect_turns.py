"""`rlrm inspect reward` on a multi-turn sample: the trajectory as the judge's {turns} shows it, the DisRM's
rendering of the whole response (observations included), and the judge prompt holding the turns."""

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


def test_inspect_shows_a_multi_turn_sample_and_its_turn_scores(tmp_path):
    fn = tmp_path / "turn_reward.py"
    fn.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
        "    turns = [t for t in extra_info['turns'] if t['role'] == 'assistant']\n"
        "    return {'score': 1.0, 'turn_scores': [0.5] * len(turns), 'seen_turns': extra_info['num_turns']}\n"
    )
    args = ["--profile", "tiny-rule", "--set", "reward.kind=custom", "--set", f"reward.custom.path={fn}"]
    path = str(rows(tmp_path, turns=TURNS))
    result = runner.invoke(app, ["inspect", "reward", *args, "--input", path, "--json"])
    assert result.exit_code == 0, result.output
    (record,) = json.loads(result.stdout)["samples"]
    assert record["turns"] == SHOWN and record["num_turns"] == 4 and record["response"] == RESPONSE
    assert record["extra"] == {"seen_turns": 4, "turn_scores": [0.5, 0.5]} and record["score"] == 1.0
    table = runner.invoke(app, ["inspect", "reward", *args, "--input", path])
    assert table.exit_code == 0, table.output
    assert "trajectory (4 turns, as {turns})" in table.output and "turn scores" in table.output


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
