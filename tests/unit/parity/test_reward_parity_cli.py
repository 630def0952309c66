"""`rlrm parity reward` through Typer's CliRunner with rewards that start nothing (the GSM8K rule, a custom
function in-process): option and input errors in one line (exit 2), the contract diff, the agreement numbers and
the verdict (exit 0 / 1). The judge runs are in tests/integration/parity/test_reward_parity_judge.py."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from rlrm.cli import parity
from rlrm.parity.reward_report import REWARD_SCORE_COLUMNS

app = typer.Typer()
app.add_typer(parity.app, name="parity")  # as rlrm.cli.main mounts it

# 3 groups of 4: the right answer, a wrong one, a malformed one (no ####), the right one again
ANSWERS = {"g0": 5, "g1": 7, "g2": 12}


def invoke(*args):
    return CliRunner().invoke(app, ["parity", "reward", *map(str, args)])


def one_error_line(result) -> str:
    """The error line: one, the last thing printed (after the progress lines of the side scored before it)."""
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.output
    return errors[0]


@pytest.fixture
def rule_input(tmp_path):
    rows = []
    for group, answer in ANSWERS.items():
        responses = [f"so #### {answer}", f"so #### {answer + 1}", f"it is {answer}", f"then #### {answer}"]
        for j, response in enumerate(responses):
            rows.append(
                {"sample_id": f"{group}#{j}", "group_id": group, "prompt": f"what is {group}?",
                 "response": response, "reference": str(answer)}
            )  # fmt: skip
    path = tmp_path / "samples.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def rule_run(rule_input, tmp_path, *b_args):
    out = tmp_path / "out"
    return invoke("--profile", "tiny-rule", "--input", rule_input, "--out", out, *b_args), out


def test_identical_rules_pass_and_say_the_contract_is_the_same(rule_input, tmp_path):
    result, out = rule_run(rule_input, tmp_path)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "pass" and summary["reasons"] == []
    assert summary["differs"] == {
        "settings": [],
        "contract": {"same": True, "a": summary["a"]["contract"]["fingerprint"],
                     "b": summary["a"]["contract"]["fingerprint"], "parts": [], "changes": []},
    }  # fmt: skip
    assert "same reward contract" in summary["notes"][0] and "note" in result.output
    # the rule gives 1 to the 6 right answers, 0 to the rest: two verdicts, the same on both sides
    binary = summary["agreement"]["binary"]
    assert binary["confusion"] == [[6, 0], [0, 6]] and binary["rate"] == 1.0 and binary["kappa"] == 1.0
    assert summary["a"]["failures"] == summary["b"]["failures"] == 0
    assert summary["a"]["judge"]["calls"] == 0  # a rule asks no model
    scores = pd.read_parquet(out / "scores.parquet")
    assert list(scores.columns) == list(REWARD_SCORE_COLUMNS) and len(scores) == 12
    assert scores["a_score"].tolist() == [1.0, 0.0, 0.0, 1.0] * 3 and (scores["a_score"] == scores["b_score"]).all()


def test_a_changed_score_fails_with_the_contract_part_and_the_reason(rule_input, tmp_path):
    # side B gives 0.5 to a well-formed wrong answer (format_score): 3 samples move by 0.5, far outside the band
    result, out = rule_run(rule_input, tmp_path, "--b-set", "reward.format_score=0.5")
    assert result.exit_code == 1, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "fail"
    assert summary["differs"]["settings"] == ["reward.format_score"]
    assert summary["differs"]["contract"]["parts"] == ["parser"]
    assert summary["differs"]["contract"]["changes"] == ["parser.rule.format_score ('0.0' -> '0.5')"]
    assert summary["stats"]["outside_tolerance"] == 3 and summary["stats"]["abs_diff_max"] == 0.5
    assert summary["reasons"][0].startswith("3 of 12 samples (allowed 0) differ by more than atol 0.03125")
    assert "max(|A|" in summary["reasons"][0]
    # three values (0, 0.5, 1): no yes/no statistics, exact agreement 9 of 12
    assert summary["agreement"]["binary"] is None and summary["agreement"]["exact"] == 0.75
    # the wrong answer now ranks above the malformed one in every group, but A ties them: no resolved flip
    assert summary["stats"]["rank_flip_groups"] == 0 and "FAIL" in result.output


def test_tolerances_can_let_a_known_difference_pass(rule_input, tmp_path):
    result, _ = rule_run(rule_input, tmp_path, "--b-set", "reward.format_score=0.5", "--atol", "0.6")
    assert result.exit_code == 0, result.output


def test_a_side_that_fails_every_sample_is_one_line(rule_input, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
                      "    raise ValueError('broken on purpose')\n")  # fmt: skip
    sets = [
        "reward.kind=custom",
        f"reward.custom.path={broken}",
        "reward.custom.isolation=thread",
        "reward.max_retries=0",
    ]
    result, out = rule_run(rule_input, tmp_path, *[x for s in sets for x in ("--b-set", s)])
    assert result.exit_code == 2
    line = one_error_line(result)
    assert line.startswith("error: side B (tiny-rule with --b-set reward.kind, --b-set reward.custom.path")
    assert "scored none of the 12 samples" in line and "broken on purpose" in line
    assert not out.exists()  # nothing half-written


def test_a_side_that_fails_some_samples_fails_the_verdict_counted_not_scored_0(rule_input, tmp_path):
    flaky = tmp_path / "flaky.py"
    flaky.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
                     "    if solution_str.startswith('it is'):\n"
                     "        raise ValueError('no answer line')\n"
                     "    return 1.0 if solution_str.endswith('#### ' + ground_truth) else 0.0\n")  # fmt: skip
    sets = [
        "reward.kind=custom",
        f"reward.custom.path={flaky}",
        "reward.custom.isolation=thread",
        "reward.max_retries=0",
    ]
    b_args = [x for s in sets for x in ("--b-set", s)]
    result, out = rule_run(rule_input, tmp_path, *b_args)
    assert result.exit_code == 1, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["b"]["failures"] == 3 and summary["a"]["failures"] == 0
    assert summary["reasons"] == [
        "side B could not score 3 of 12 samples (allowed 0; first error: reward function compute_score raised ValueError: no answer line (sample g0))"
    ]
    scores = pd.read_parquet(out / "scores.parquet")
    failed = scores[scores["b_error"].notna()]
    assert failed["sample_id"].tolist() == ["g0#2", "g1#2", "g2#2"] and failed["b_score"].isna().all()
    # on the 9 both scored, the custom function agrees with the rule
    assert summary["agreement"]["compared"] == 9 and summary["agreement"]["binary"]["kappa"] == 1.0
    again = invoke("--profile", "tiny-rule", "--input", rule_input, "--out", out, *b_args, "--max-failed-frac", "0.25")
    assert (
        again.exit_code == 2
        and again.output.strip() == f"error: --out {out} is not empty; choose another --out or remove it"
    )
    assert json.loads((out / "summary.json").read_text()) == summary  # the earlier result is kept as it was
    result, _ = rule_run(rule_input, tmp_path / "allowed", *b_args, "--max-failed-frac", "0.25")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--b-set", "reward.genrm.templat=x"],
            "side B (tiny-rule with --b-set reward.genrm.templat): unknown key "
            "'reward.genrm.templat'; did you mean 'reward.genrm.template'?",
        ),
        (["--b-set", "trainer.seed=3"], "--b-set trainer.seed: side B differs from side A in its reward only"),
        (["--b-set", "reward.genrm.temperature"], "--b-set 'reward.genrm.temperature': give KEY=VALUE"),
        (["--b-profile", "nope"], "side B (nope): unknown profile 'nope'"),
        (["--max-failed-frac", "2"], "Invalid value for '--max-failed-frac'"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(rule_input, args, needle):
    result = invoke("--profile", "tiny-rule", "--input", rule_input, *args)
    assert result.exit_code == 2
    assert needle in result.output, result.output
    if not args[0].startswith("--max"):  # Typer's own range check prints its usage box
        one_error_line(result)


def test_a_missing_input_and_missing_references_are_one_line(rule_input, tmp_path):
    result = invoke("--profile", "tiny-rule", "--input", tmp_path / "nope.jsonl")
    assert result.exit_code == 2 and "input file" in one_error_line(result) and "does not exist" in result.output
    rows = [json.loads(line) for line in rule_input.read_text().splitlines()]
    no_refs = tmp_path / "no-refs.jsonl"
    no_refs.write_text("\n".join(json.dumps({k: v for k, v in r.items() if k != "reference"}) for r in rows))
    result = invoke("--profile", "tiny-rule", "--input", no_refs, "--out", tmp_path / "out")
    line = one_error_line(result)
    assert result.exit_code == 2 and line.startswith(
        "error: side A (tiny-rule): its reward compares with the reference"
    )
    assert "12 of 12 samples carry none" in line and not (tmp_path / "out").exists()


def test_dry_run_shows_both_sides_and_what_differs(rule_input):
    result = invoke("--profile", "tiny-genrm", "--b-set", "reward.genrm.temperature=0.7", "--dry-run")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["samples"] == "8 prompts x 8 of tiny:policy"
    assert shown["settings_that_differ"] == ["reward.genrm.temperature"]
    assert shown["sides"]["A"]["reward"]["genrm"]["temperature"] == 0.0
    assert shown["sides"]["B"]["reward"]["genrm"]["temperature"] == 0.7
    assert shown["sides"]["B"]["origin"] == "tiny-genrm with --b-set reward.genrm.temperature"
