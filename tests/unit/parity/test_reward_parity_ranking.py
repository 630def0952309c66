"""`rlrm parity reward` on two custom rewards (in-process, nothing started) that score every response within
the band of the other but rank the groups differently: the tester's reversed-ranking case fails and says why,
a few hundredths of noise passes."""

from __future__ import annotations

import json

import pytest

from tests.unit.parity.test_reward_parity_cli import invoke

# response k of group g reads "answer k of g"; scores are logits around -10, as a DisRM's can be
FUNCTION = """import math, zlib
def compute_score(data_source, solution_str, ground_truth, extra_info):
    k = int(solution_str.split()[1])
    return {score}
"""


@pytest.fixture
def groups_input(tmp_path):
    rows = [
        {"sample_id": f"g{g}#{k}", "group_id": f"g{g}", "prompt": f"question {g}?", "response": f"answer {k} of {g}",
         "reference": "0"}
        for g in range(16)
        for k in range(4)
    ]  # fmt: skip
    path = tmp_path / "groups.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def run_pair(tmp_path, groups_input, score_a: str, score_b: str, *options):
    paths = {}
    for name, score in (("a", score_a), ("b", score_b)):
        paths[name] = tmp_path / f"reward_{name}.py"
        paths[name].write_text(FUNCTION.format(score=score))
    both = ["reward.kind=custom", "reward.custom.isolation=thread", "reward.max_retries=0"]
    args = [x for s in [*both, f"reward.custom.path={paths['a']}"] for x in ("--set", s)]
    out = tmp_path / "out"
    result = invoke(
        "--profile", "tiny-rule", "--input", groups_input, *args, "--b-set", f"reward.custom.path={paths['b']}",
        "--out", out, *options,
    )  # fmt: skip
    return result, json.loads((out / "summary.json").read_text())


def test_a_reversed_ranking_within_the_band_fails_naming_the_within_group_pearson(tmp_path, groups_input):
    result, summary = run_pair(tmp_path, groups_input, "-10 + 0.4 * k", "-10 + 0.4 * (3 - k)")
    assert result.exit_code == 1, result.output
    stats = summary["stats"]
    # everything the band judges passes: the reversal hides inside a band of ~1.2 per sample
    assert stats["outside_tolerance"] == 0 and stats["rank_flip_groups"] == 0 and stats["spearman"] is None
    assert stats["group_pearson"] == pytest.approx(-1.0) and stats["group_spread_a"] == pytest.approx(0.4472, abs=1e-4)
    assert summary["reasons"] == [
        "within-group Pearson -1.0000 below --min-group-pearson 0.9: B orders the responses of a group otherwise "
        "than A (an oppositely ordered pair in 16 of 16 groups, GRPO advantage signs equal on 0.0% of samples)"
    ]
    assert summary["tolerances"]["min_group_pearson"] == 0.9
    assert "within-group Pearson" in result.output and "FAIL" in result.output


def test_noise_of_a_few_hundredths_passes(tmp_path, groups_input):
    # B: A plus a fixed pseudo-random +-0.02 per response (from the crc32 of its text), as rounding would add
    noise = "0.02 * math.sin(zlib.crc32(solution_str.encode()))"
    result, summary = run_pair(tmp_path, groups_input, "-10 + 0.4 * k", f"-10 + 0.4 * k + {noise}")
    assert result.exit_code == 0, result.output
    assert summary["reasons"] == [] and 0.99 < summary["stats"]["group_pearson"] < 1.0


def test_the_threshold_is_an_option(tmp_path, groups_input):
    result, summary = run_pair(
        tmp_path, groups_input, "-10 + 0.4 * k", "-10 + 0.4 * (3 - k)", "--min-group-pearson", "-1"
    )
    assert result.exit_code == 0, result.output
    assert summary["tolerances"]["min_group_pearson"] == -1.0 and summary["reasons"] == []
