"""`rlrm inspect reward` on a multi-turn sample: the trajectory as the judge's {turns} shows it, the DisRM's
rendering of the whole response (observations included), and the judge prompt holding the turns."""

from __future__ import annotations

import json

from rlrm.cli.main import app
from tests.unit.reward_checks.test_inspect_turns import RESPONSE, SHOWN, TURNS, rows, runner


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
