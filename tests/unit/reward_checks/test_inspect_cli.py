"""`rlrm inspect reward` input rows missing fields, and a rule profile's note on what is shown."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from rlrm.cli.main import app

runner = CliRunner()


QUESTION = "Kim has 2 pens. She buys 6 more pens. How many pens does Kim have now?"


def invoke(*args):
    return runner.invoke(app, ["inspect", "reward", *map(str, args)])


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_rows_missing_fields_are_named(tmp_path):
    path = write_rows(tmp_path / "in.jsonl", [{"prompt": QUESTION, "response": "8"}, {"prompt": QUESTION}])
    result = invoke("--profile", "tiny-rule", "--input", path)
    assert result.exit_code == 2
    assert f"{path} row 2: missing field(s) response" in result.output
    result = invoke("--profile", "tiny-rule", "--input", path, "--prompt", "q", "--response", "r")
    assert result.exit_code == 2 and "either --input FILE or --prompt/--response" in result.output
    result = invoke("--profile", "tiny-rule", "--prompt", "q")
    assert result.exit_code == 2 and "--prompt and --response go together" in result.output
    result = invoke("--profile", "tiny-rule", "--invariance", "--prompt", "q", "--response", "r")
    assert result.exit_code == 2 and "reward.kind=rule serves no DisRM" in result.output


def test_rule_profile_says_what_is_shown_instead():
    result = invoke(
        "--profile",
        "tiny-rule",
        "--prompt",
        QUESTION,
        "--response",
        "2 + 6 = 8\n#### 8",
        "--ground-truth",
        "8",
        "--json",
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert "has no reward model to inspect" in report["notes"][0]
    (record,) = report["samples"]
    assert record["extracted_answer"] == "8" and record["score"] == 1.0 and report["lints"] == []


def test_the_math_rule_is_inspected_as_such():
    # it stopped with "unexpected KeyError: 'method'" (the MATH rule has none), its note naming the GSM8K rule
    args = ["--profile", "tiny-rule", "--set", "reward.rule=math", "--prompt", QUESTION]
    args += ["--response", "so $\\boxed{\\dfrac{1}{2}}$", "--ground-truth", "0.5"]
    shown = invoke(*args)
    assert shown.exit_code == 0, shown.output
    assert "MATH rule" in shown.output and "GSM8K" not in shown.output and "(math) -> 1" in shown.output
    report = json.loads(invoke(*args, "--json").stdout)
    (record,) = report["samples"]
    assert (record["extracted_answer"], record["score"], record["rule"]) == ("\\dfrac{1}{2}", 1.0, "math")


def custom_reward(tmp_path, body: str):
    path = tmp_path / "reward.py"
    path.write_text(
        f"import sys\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info):\n    {body}\n"
    )
    # thread isolation: the function runs in this process, no worker processes started
    return ("--profile", "tiny-rule", "--set", "reward.kind=custom", "--set", f"reward.custom.path={path}",
            "--set", "reward.custom.isolation=thread", "--prompt", QUESTION, "--response", "#### 8")  # fmt: skip


def test_strict_fails_a_custom_reward_that_fails_every_sample(tmp_path):
    args = custom_reward(tmp_path, "sys.exit(3)")
    result = invoke(*args, "--strict", "--json")
    assert result.exit_code == 1, result.output
    (lint,) = json.loads(result.stdout)["lints"]
    assert lint["lint"] == "reward-failed" and lint["samples"] == [0]
    assert "called sys.exit(3)" in lint["message"]
    assert invoke(*args).exit_code == 0  # without --strict a lint is a warning


def test_strict_fails_a_score_beyond_float32(tmp_path):
    # 1e39 is a finite Python float and inf in float32: the loop fails the sample, and the lint says so
    result = invoke(*custom_reward(tmp_path, "return 1e39"), "--strict", "--json")
    assert result.exit_code == 1, result.output
    (lint,) = json.loads(result.stdout)["lints"]
    assert lint["lint"] == "reward-failed" and "beyond float32's range" in lint["message"]
    result = invoke(*custom_reward(tmp_path, "return {'score': 1.0, 'reward_components': {'a': 1e39}}"), "--strict")
    assert result.exit_code == 1 and "reward-failed" in result.output  # a component too: the loop fails the sample


def test_an_input_rows_extra_info_reaches_the_function_as_in_training(tmp_path):
    # a verl function reading extra_info keys (its dataset's index, split) could not be checked with --input: only
    # {"question"} was built
    path = tmp_path / "fn.py"
    path.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
        "    return {'score': float(extra_info['index']), 'question': extra_info['question']}\n"
    )
    rows = [{"prompt": QUESTION, "response": "#### 8", "extra_info": {"index": 7, "split": "test"}}]
    sets = [
        "--set",
        "reward.kind=custom",
        "--set",
        f"reward.custom.path={path}",
        "--set",
        "reward.custom.isolation=thread",
    ]
    result = invoke("--profile", "tiny-rule", *sets, "--input", write_rows(tmp_path / "in.jsonl", rows), "--json")
    assert result.exit_code == 0, result.output
    (sample,) = json.loads(result.stdout)["samples"]
    assert sample["score"] == 7.0 and sample["extra"]["question"] == QUESTION
    bad = write_rows(tmp_path / "bad.jsonl", [{"prompt": QUESTION, "response": "r", "extra_info": [1]}])
    result = invoke("--profile", "tiny-rule", "--input", bad)
    assert result.exit_code == 2 and f"{bad} row 1: extra_info must be an object, got list" in result.output
