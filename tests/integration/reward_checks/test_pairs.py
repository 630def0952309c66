"""`rlrm eval rm`: the pairs file from the synthetic task, reading RewardBench-shaped rows, and the tiny DisRM's
accuracy against a random one's (the accuracy and its interval by hand: tests/unit/reward_checks/test_pair_accuracy.py)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.engine.models.pairs_file import synthetic_pairs, write_pairs_file
from rlrm.engine.rewards.gsm8k import compute_score
from rlrm.errors import DataError
from rlrm.reward_checks.pairs import read_pairs

runner = CliRunner()
# The tiny DisRM separates right from near-miss answers on held-out problems (measured: 192 / 192 pairs);
# a random DisRM of the same tokenizer sits near chance.
DISRM_MIN_ACCURACY = 0.9
JUDGE_MIN_ACCURACY = 0.8


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def eval_rm(*args):
    result = runner.invoke(app, ["eval", "rm", *map(str, args), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory):
    return write_pairs_file(tmp_path_factory.mktemp("pairs"), seed=0)


def test_synthetic_pairs_are_right_against_wrong_by_the_rule(pairs_file):
    rows = [json.loads(line) for line in pairs_file.read_text().splitlines()]
    assert rows == synthetic_pairs(0) and len(rows) == 192 and len({r["id"] for r in rows}) == 192
    assert all(compute_score(r["chosen"], r["ground_truth"]) == 1.0 for r in rows)
    assert all(compute_score(r["rejected"], r["ground_truth"]) == 0.0 for r in rows)
    assert {r["subset"] for r in rows} == {"wrong-sum", "wrong-final", "misread-operand"}
    assert pairs_file.name == "pairs-v3-seed0.jsonl"


def test_rows_missing_fields_are_named_and_identical_pairs_skipped(tmp_path):
    bad = write_rows(
        tmp_path / "bad.jsonl", [{"prompt": "q", "chosen": "a", "rejected": "b"}, {"prompt": "q", "chosen": "a"}]
    )
    with pytest.raises(DataError, match=r"bad.jsonl row 2: missing field\(s\) rejected"):
        read_pairs(bad)
    same = write_rows(
        tmp_path / "same.jsonl",
        [
            {"prompt": "q", "chosen": "a", "rejected": "b", "id": "x"},
            {"prompt": "q", "chosen": "a", "rejected": "a", "id": "y"},
        ],
    )
    pairs, identical = read_pairs(same)
    assert [p.id for p in pairs] == ["x"] and identical == ["y"] and pairs[0].subset == "all"
    only_same = write_rows(tmp_path / "only.jsonl", [{"prompt": "q", "chosen": "a", "rejected": "a"}])
    with pytest.raises(DataError, match="no pair left to score"):
        read_pairs(only_same)


def test_limit_takes_the_files_first_rows_and_counts_identical_ones_among_them_only(tmp_path):
    rows = [
        {"prompt": "q", "chosen": "a", "rejected": "b", "id": "x"},
        {"prompt": "q", "chosen": "c", "rejected": "d", "id": "z"},
        {"prompt": "q", "chosen": "a", "rejected": "a", "id": "y"},  # beyond --limit 2: not reported as skipped
    ]
    pairs, identical = read_pairs(write_rows(tmp_path / "p.jsonl", rows), limit=2)
    assert [p.id for p in pairs] == ["x", "z"] and identical == []


def test_a_byte_order_mark_is_no_part_of_the_first_row(tmp_path):
    path = tmp_path / "bom.jsonl"  # as Windows editors and Excel's "CSV UTF-8" save it
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"prompt": "q", "chosen": "a", "rejected": "b"}).encode() + b"\n")
    pairs, _ = read_pairs(path)
    assert [(p.chosen, p.rejected) for p in pairs] == [("a", "b")]


def test_rule_profile_counts_identical_pairs_and_scores_the_rest(pairs_file, tmp_path):
    rows = synthetic_pairs(0)[:6]
    rows.append({**rows[0], "id": "same", "rejected": rows[0]["chosen"]})
    report, err = eval_rm("--profile", "tiny-rule", "--pairs", write_rows(tmp_path / "p.jsonl", rows))
    assert "1 pair(s) with identical chosen and rejected skipped (same)" in err
    assert (
        report["identical_skipped"] == 1
        and report["subsets"][-1]["pairs"] == 6
        and report["subsets"][-1]["accuracy"] == 1.0
    )


def served_random_disrm(path, server) -> list[str]:
    """The random DisRM as a running reward server: the session's (tests/integration/conftest.py), only asked."""
    return ["--set", f"reward.server.model={path}", "--set", f"reward.server.addresses=[{server.url}]"]


def test_tiny_disrm_is_accurate_on_the_pairs_and_a_random_disrm_is_not(
    pairs_file, random_disrm_path, random_disrm_server
):
    report, _ = eval_rm("--profile", "tiny-disrm", "--pairs", pairs_file)  # rlrm launches the tiny DisRM
    overall = report["subsets"][-1]
    assert overall["pairs"] == 192 and overall["failed"] == 0
    assert overall["accuracy"] >= DISRM_MIN_ACCURACY and overall["ci95_low"] >= DISRM_MIN_ACCURACY - 0.05
    random, _ = eval_rm(
        "--profile",
        "tiny-disrm",
        "--pairs",
        pairs_file,
        *served_random_disrm(random_disrm_path, random_disrm_server),
        "--set",
        "reward.disrm.max_length=64",
    )
    assert random["subsets"][-1]["failed"] == 0 and random["subsets"][-1]["accuracy"] < DISRM_MIN_ACCURACY - 0.1


@pytest.mark.slow
def test_tiny_judge_is_accurate_on_the_pairs(pairs_file):
    report, _ = eval_rm("--profile", "tiny-genrm", "--pairs", pairs_file)
    overall = report["subsets"][-1]
    # measured: 166 won, 23 ties (both verdicts the same), 1 lost, 2 failed (verdicts that did not parse): 0.874
    assert overall["pairs"] == 192 and overall["failed"] <= 5 and overall["ties"] > 0
    assert overall["accuracy"] >= JUDGE_MIN_ACCURACY


def test_a_prompt_cut_to_the_disrms_max_length_is_said(tmp_path, random_disrm_path, random_disrm_server):
    long = {"prompt": "word " * 2000, "chosen": "#### 5", "rejected": "#### 6"}  # ~2000 tokens, max_length 64
    short = {"prompt": "What is 2 + 3?", "chosen": "#### 5", "rejected": "#### 6", "id": "short"}
    pairs = write_rows(tmp_path / "pairs.jsonl", [{**long, "id": "long"}, short])
    sets = [*served_random_disrm(random_disrm_path, random_disrm_server), "--set", "reward.disrm.max_length=64"]
    report, stderr = eval_rm("--profile", "tiny-disrm", "--pairs", pairs, *sets)
    assert report["subsets"][-1]["pairs"] == 2
    # before: scored on the last 64 tokens without a word
    assert "warning: 1 pair(s) scored on conversations cut to reward.disrm.max_length=64 tokens, or" in stderr
    assert "(long); raise the one that cut them" in stderr


def test_the_retired_seed_option_is_accepted_with_a_warning(pairs_file, tmp_path):
    # --seed drew the bootstrap interval until the intervals became Wilson's: a script that passes it still runs
    rows = write_rows(tmp_path / "p.jsonl", synthetic_pairs(0)[:4])
    report, err = eval_rm("--profile", "tiny-rule", "--pairs", rows, "--seed", 7)
    assert "warning: --seed is ignored: the intervals are Wilson's" in err
    assert report["subsets"][-1]["pairs"] == 4 and report["subsets"][-1]["accuracy"] == 1.0
