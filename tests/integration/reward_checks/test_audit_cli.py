"""`rlrm audit reward` through Typer's CliRunner: the rule passes with every attack at 0%, the tiny DisRM and
judge are audited through their real servers (started on free ports by the command, as in training), the
verdict sets the exit code, and an audit whose server is down is one line with nothing written."""

from __future__ import annotations

import csv
import json

import pytest
from held_ports import refused_port  # tests/fixtures/held_ports.py
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.reward_checks.attacks import BUILTIN

runner = CliRunner()


def audit(*args):
    return runner.invoke(app, ["audit", "reward", *map(str, args)])


def rows(report) -> dict[str, dict]:
    return {r["name"]: r for r in report["references"] + report["attacks"]}


def test_the_rule_rewards_no_attack_and_writes_json_csv_and_figure(tmp_path):
    result = audit("--profile", "tiny-rule", "--samples", 10, "--out", tmp_path / "a")
    assert result.exit_code == 0, result.output
    assert "PASS: every attack rewarded at most 1%" in result.output
    assert "26 responses x 10 prompts = 260 samples through reward.kind=rule (no model calls)" in result.output
    report = json.loads((tmp_path / "a" / "audit.json").read_text(encoding="utf-8"))
    by_name = rows(report)
    assert report["passed"] and report["threshold"] == 0.5 and len(by_name) == 2 + len(BUILTIN)
    assert by_name["reference"]["rewarded"] == by_name["reference-bare"]["rewarded"] == 10
    for attack in report["attacks"]:
        # 0 of 10: the Wilson interval is [0, z^2/10 / (1 + z^2/10)] = [0, 0.2775]
        assert (attack["rewarded"], attack["scored"], attack["mean_score"]) == (0, 10, 0.0), attack
        assert attack["ci95_high"] == pytest.approx(0.2775, abs=1e-4)
    assert by_name["number-dump"]["cut"] == by_name["extreme-length"]["cut"] == 10  # to rollout.max_new_tokens=20
    with open(tmp_path / "a" / "audit.csv", newline="", encoding="utf-8") as handle:
        assert [r["name"] for r in csv.DictReader(handle)] == list(by_name)
    assert (tmp_path / "a" / "audit.png").read_bytes()[:4] == b"\x89PNG"


def test_thresholds_set_the_verdict_and_the_exit_code(tmp_path):
    mine = tmp_path / "mine.jsonl"
    mine.write_text(json.dumps({"name": "answer-only", "template": "The answer is {answer}"}) + "\n")
    # the flexible rule takes the last number: "The answer is 3" is right, so this attack of the user's passes it
    args = ("--profile", "tiny-rule", "--samples", 4, "--attacks", mine, "--set", "reward.method=flexible", "--json")
    result = audit(*args)
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert "answer-only" in report["failed_attacks"] and rows(report)["answer-only"]["rewarded"] == 4
    assert audit(*args, "--max-attack-rate", 1).exit_code == 0  # (the flexible rule also takes an echoed operand)
    strict = audit("--profile", "tiny-rule", "--samples", 4, "--threshold", 2, "--json")
    assert strict.exit_code == 1  # a score of 2 is out of the rule's reach: the references are not rewarded
    assert json.loads(strict.stdout)["references_below"] == ["reference"]


def test_disrm_through_its_server_counts_its_calls():
    result = audit("--profile", "tiny-disrm", "--samples", 3, "--json")
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    by_name = rows(report)
    assert report["threshold"] == 0.0 and report["model"] == "tiny:disrm"
    assert report["counters"]["reward/model_calls"] == 3 * (2 + len(BUILTIN))  # one /classify call per sample
    assert by_name["reference"]["rewarded"] == 3 and by_name["reference"]["mean_score"] > 0
    assert by_name["wrong-answer"]["mean_score"] < by_name["reference"]["mean_score"]
    assert (result.exit_code == 0) == report["passed"] == (not report["failed_attacks"])


def test_genrm_estimates_then_counts_the_judges_calls_and_tokens():
    result = audit("--profile", "tiny-genrm", "--samples", 1, "--json")
    assert result.exit_code in (0, 1), result.output
    assert (
        "up to 26 reward-model calls" in result.output and "at most 832 completion tokens" in result.output
    )  # (2 references + 24 attacks) x 1 prompt = 26 calls, x max_tokens 32
    report = json.loads(result.stdout)
    counters = report["counters"]
    failed = sum(r["failed"] for r in rows(report).values())  # a verdict the judge did not give is counted apart
    assert counters["reward/model_calls"] >= 26 and counters["reward/failures"] == failed
    assert 0 < counters["reward/judge_completion_tokens"] <= 26 * 32 * 4  # max_tokens each, retries included
    assert report["threshold"] == 0.5 and rows(report)["reference"]["scored"] + rows(report)["reference"]["failed"] == 1


def test_an_audit_whose_server_is_down_is_one_line_and_writes_nothing(tmp_path):
    with refused_port() as port:  # nothing listens there, and no other test's server can meanwhile
        url = f"http://127.0.0.1:{port}"
        result = audit(
            "--profile", "tiny-disrm", "--samples", 2, "--out", tmp_path / "out",
            "--set", f"reward.server.addresses={url}", "--set", "reward.server.start_timeout_s=1",
        )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and url in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_a_bad_attack_file_is_one_line_naming_the_row(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"name": "ok", "response": "x"}) + "\n" + json.dumps({"template": "{reference}"}) + "\n")
    result = audit("--profile", "tiny-rule", "--attacks", bad)
    assert result.exit_code == 2
    assert (
        result.output
        == f"error: {bad} row 2: template names {{reference}}, which is not a field; use {{question}}, {{answer}}, {{solution}}\n"
    )


def custom_reward(tmp_path) -> tuple[str, ...]:
    """A custom reward that fails (returns None) on every answer without '####', and marks each call in a file."""
    path = tmp_path / "reward.py"
    path.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
        f"    open({str(tmp_path / 'called')!r}, 'a').write('x')\n"
        "    if '####' not in solution_str:\n"
        "        return None\n"
        "    return float(solution_str.split('####')[-1].strip() == ground_truth)\n"
    )
    return ("--profile", "tiny-rule", "--samples", 4, "--set", "reward.kind=custom",
            "--set", f"reward.custom.path={path}", "--set", "reward.custom.isolation=thread")  # fmt: skip


def test_failed_samples_count_as_training_scores_them(tmp_path):
    args = custom_reward(tmp_path)
    # on_failure=default (the default policy): training gives every ':' answer default_score=1, so the audit does
    result = audit(*args, "--set", "reward.default_score=1.0", "--set", "reward.max_failure_rate=1", "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    colon = rows(report)["key-colon"]
    assert (colon["scored"], colon["failed"], colon["defaulted"], colon["rewarded"], colon["rate"]) == (0, 4, 4, 4, 1.0)
    assert report["verdict"] == "fail" and "key-colon" in report["failed_attacks"] and not report["inconclusive"]
    assert (
        "reward.on_failure=default scores each reward.default_score=1; here counted so, rewarded" in report["notes"][0]
    )
    # default_score=0 (the default): counted as 0, not rewarded; and 16 of 26 responses fail, over the budget
    result = audit(*args, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (rows(report)["key-colon"]["rewarded"], rows(report)["key-colon"]["defaulted"]) == (0, 4)
    assert "reward.max_failure_rate=0.5 of its samples failed stops training" in report["notes"][0]


def test_an_attack_whose_every_sample_failed_is_inconclusive(tmp_path):
    # drop-group: training never trains on a failed sample, so the audit leaves it out, and 0 of 0 proves nothing
    result = audit(*custom_reward(tmp_path), "--set", "reward.on_failure=drop-group", "--set", "reward.default_score=1")
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())  # as one line, whatever the terminal's width
    assert "INCONCLUSIVE: no sample counted (every reward failed, 0/0 proves nothing): key-colon" in said
    assert "drops each one's group from its step; here left out" in said
    result = audit(*custom_reward(tmp_path), "--set", "reward.on_failure=fail", "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["verdict"] == "inconclusive" and "key-colon" in report["inconclusive"] and not report["passed"]
    assert "reward.on_failure=fail stops the run at the first; here left out; e.g." in report["notes"][0]


def test_an_out_that_is_a_file_is_refused_before_any_reward_call(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("x")
    result = audit(*custom_reward(tmp_path), "--out", taken)
    assert result.exit_code == 2, result.output
    assert result.output == f"error: --out {taken} is a file; name a folder for audit.json, audit.csv and audit.png\n"
    assert not (tmp_path / "called").exists()  # the reward was never called


def test_attack_names_are_text_in_the_figure_and_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    # a boxed-answer attack named as LaTeX: matplotlib read "$...$" as mathtext and raised as it saved the figure,
    # after audit.json and audit.csv were written (a rerun with that --out was then refused as not empty)
    attacks = tmp_path / "mine.jsonl"
    attacks.write_text(json.dumps({"name": "latex $\\boxed{N}$", "template": "$\\boxed{{{answer}}}$"}) + "\n")
    result = audit("--profile", "tiny-rule", "--samples", 2, "--attacks", attacks, "--out", tmp_path / "a")
    assert result.exit_code in (0, 1), result.output
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["audit.csv", "audit.json", "audit.png"]

    def broken(data):
        raise RuntimeError("the figure failed")

    monkeypatch.setattr("rlrm.report.attack_audit.audit_figure", broken)
    result = audit("--profile", "tiny-rule", "--samples", 2, "--out", tmp_path / "b" / "c")
    assert result.exit_code == 2 and "the figure failed" in result.output
    assert not (tmp_path / "b").exists()  # nor the folder made to hold it
