"""`rlrm eval rm`'s accuracy: Wilson intervals by hand, ties and failures counted apart, and a reward that failed
every pair (a judge that is down) refused as one line, with JSON that strict parsers read (null, never NaN)."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.reward_checks.pairs import Pair, ScoredPair, accuracy_table

# A custom reward (async: it runs on a thread, no worker process) that fails on the responses saying "fail".
FLAKY_REWARD = """
async def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if "fail" in solution_str:
        raise RuntimeError("the judge is down")
    return 1.0 if solution_str.strip() == "#### " + ground_truth else 0.0
"""


def _sp(subset: str, chosen: float, rejected: float) -> ScoredPair:
    return ScoredPair(Pair("i", subset, [{"role": "user", "content": "q"}], "c", "r"), chosen, rejected)


def test_accuracy_ties_failures_and_wilson_interval_by_hand():
    scored = [_sp("a", 1.0, 0.0), _sp("a", 1.0, 1.0), _sp("a", 0.0, 1.0), _sp("a", math.nan, 0.0), _sp("b", 2.0, 1.0)]
    a, b, overall = accuracy_table(scored)
    # subset a: 3 scored pairs (1 failed): 1 won, 1 tie, 1 lost -> accuracy 1/3
    assert (a["pairs"], a["won"], a["ties"], a["lost"], a["failed"]) == (4, 1, 1, 1, 1)
    assert a["accuracy"] == pytest.approx(1 / 3)
    # Wilson, z = 1.96, z^2 = 3.8415, n = 3, p = 1/3: centre (p + z^2/2n) / (1 + z^2/n) = 0.9736 / 2.2805 = 0.4269,
    # half-width z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n) = 1.96 x sqrt(0.0741 + 0.1067) / 2.2805 = 0.3654
    assert (a["ci95_low"], a["ci95_high"]) == pytest.approx((0.0615, 0.7923), abs=1e-4)
    # subset b: 1 of 1 won. The percentile bootstrap resampled only wins: 1.000-1.000. Wilson: centre
    # (1 + 1.9207) / 4.8415 = 0.6033, half-width 1.96 x sqrt(3.8415 / 4) / 4.8415 = 0.3967 -> 0.2065-1.000
    assert b["accuracy"] == 1.0 and b["ci95_low"] == pytest.approx(0.2065, abs=1e-4) and b["ci95_high"] == 1.0
    assert overall["subset"] == "overall" and overall["won"] == 2 and overall["accuracy"] == pytest.approx(0.5)
    # 0 of 4 won: the bound is 0 exactly; the top is centre + half-width = 2 x (3.8415 / 8) / 1.9604 = 0.4899
    none_won = accuracy_table([_sp("c", 0.0, 1.0)] * 4)[-1]
    assert none_won["ci95_low"] == 0.0 and none_won["ci95_high"] == pytest.approx(0.4899, abs=1e-4)  # not 0.000-0.000


def test_a_subset_with_no_scored_pair_has_no_accuracy():
    failed, overall = accuracy_table([_sp("x", math.nan, 1.0), _sp("y", 1.0, 0.0)])[0::2]
    assert failed["failed"] == 1 and math.isnan(failed["accuracy"]) and math.isnan(failed["ci95_low"])
    assert overall["accuracy"] == 1.0


def _pairs_file(tmp_path, rows) -> list[str]:
    reward = tmp_path / "flaky.py"
    reward.write_text(FLAKY_REWARD)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ["eval", "rm", "--profile", "tiny-rule", "--pairs", str(pairs)] + [
        "--set",
        "reward.kind=custom",
        "--set",
        f"reward.custom.path={reward}",
        "--set",
        "reward.max_retries=0",
    ]


def test_every_pair_failed_is_one_error_line_naming_the_first_error(tmp_path):
    rows = [
        {"prompt": "2+3?", "chosen": "#### fail", "rejected": "#### 6", "ground_truth": "5", "id": f"p{i}"}
        for i in range(3)
    ]
    args = _pairs_file(tmp_path, rows)
    for extra in ([], ["--json"]):
        result = CliRunner().invoke(app, args + extra)
        assert result.exit_code == 1, result.output  # before: exit 0, "accuracy nan, nan - nan"
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: every one of 3 pairs failed to score"), lines
        assert "the first error (pair p0): " in lines[0] and "the judge is down" in lines[0]


def test_json_writes_null_for_a_subset_whose_pairs_all_failed(tmp_path):
    rows = [
        {"prompt": "2+3?", "chosen": "#### 5", "rejected": "#### 6", "ground_truth": "5", "subset": "ok"},
        {"prompt": "2+2?", "chosen": "#### fail", "rejected": "#### 6", "ground_truth": "4", "subset": "down"},
    ]
    result = CliRunner().invoke(app, _pairs_file(tmp_path, rows) + ["--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    down, ok, overall = report["subsets"]
    assert down["subset"] == "down" and down["failed"] == 1
    assert (down["accuracy"], down["ci95_low"], down["ci95_high"]) == (None, None, None)
    assert ok["accuracy"] == 1.0 and overall["won"] == 1 and overall["failed"] == 1
    # why it failed, as audit and inspect say: the table and --json counted it without a word
    assert "warning: 1 pair(s) failed to score and are left out of the accuracy; the first (pair " in result.stderr
    assert "the judge is down" in result.stderr
    table = CliRunner().invoke(app, _pairs_file(tmp_path, rows))
    assert table.exit_code == 0 and "nan" not in table.output


def _one_pair(tmp_path, **row):
    path = tmp_path / "pairs.jsonl"
    base = {"prompt": "What is 3 - 3?", "chosen": "3 - 3 = 0\n#### 0", "rejected": "3 - 3 = 6\n#### 6"}
    path.write_text(json.dumps({**base, **row}) + "\n")
    return path


def test_a_ground_truth_of_0_is_the_answer_0():
    # `row.get("ground_truth") or ""` turned 0 into "": the rule scored both sides against nothing, a tie
    import tempfile
    from pathlib import Path

    from rlrm.reward_checks.pairs import read_pairs

    with tempfile.TemporaryDirectory() as folder:
        (pair,), _ = read_pairs(_one_pair(Path(folder), ground_truth=0, subset=0))
    assert (pair.ground_truth, pair.subset) == ("0", "0")


def test_eval_rm_with_a_ground_truth_of_0_wins_the_pair(tmp_path):
    pairs = _one_pair(tmp_path, ground_truth=0)
    result = CliRunner().invoke(app, ["eval", "rm", "--profile", "tiny-rule", "--pairs", str(pairs), "--json"])
    assert result.exit_code == 0, result.output
    overall = json.loads(result.stdout)["subsets"][-1]
    assert (overall["won"], overall["ties"], overall["accuracy"]) == (1, 0, 1.0)


def test_subset_names_are_text_in_the_table_and_overall_is_reserved(tmp_path):
    # rich read "math[/prm]" as markup and crashed once every pair had been scored
    result = CliRunner().invoke(
        app, ["eval", "rm", "--profile", "tiny-rule", "--pairs", str(_one_pair(tmp_path, subset="math[/prm]"))]
    )
    assert result.exit_code == 0, result.output
    assert "math[/prm]" in result.output
    taken = CliRunner().invoke(
        app, ["eval", "rm", "--profile", "tiny-rule", "--pairs", str(_one_pair(tmp_path, subset="overall"))]
    )
    assert taken.exit_code != 0 and "subset 'overall' is the name of the row over every pair" in taken.output
