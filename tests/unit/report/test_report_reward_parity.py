"""`rlrm report` on a folder written by `rlrm parity reward` (scores.parquet with a_score / b_score): the same parity
figures as for `parity disrm`, with the sides named A and B. The folder is written by the command itself (the GSM8K
rule on both sides, side B with format_score 0.5: in-process, nothing started)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from rlrm.cli import parity as parity_cli
from rlrm.cli.report import report
from rlrm.report import parity

# 3 groups of 4: the right answer, a wrong one, a malformed one (no ####), the right one again
ANSWERS = {"g0": 5, "g1": 7, "g2": 12}


@pytest.fixture(scope="module")
def reward_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("reward-parity")
    rows = [
        {"sample_id": f"{g}#{j}", "group_id": g, "prompt": f"what is {g}?", "response": response,
         "reference": str(answer)}
        for g, answer in ANSWERS.items()
        for j, response in enumerate([f"so #### {answer}", f"so #### {answer + 1}", f"it is {answer}",
                                      f"then #### {answer}"])
    ]  # fmt: skip
    (root / "in.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    app = typer.Typer()
    app.add_typer(parity_cli.app, name="parity")
    args = ["parity", "reward", "--profile", "tiny-rule", "--input", str(root / "in.jsonl"),
            "--b-set", "reward.format_score=0.5", "--out", str(root / "out")]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output  # 3 samples move by 0.5: FAIL, which the figures show
    return root / "out"


def test_the_figures_read_a_and_b_and_name_the_sides(reward_folder):
    scores = pd.read_parquet(reward_folder / "scores.parquet")
    assert {"a_score", "b_score", "a_adv", "b_adv"} <= set(scores.columns) and "legacy_score" not in scores.columns
    assert parity.sides_of(scores, "scatter") == parity.REWARD_SIDES
    fig = parity.scatter_figure(scores)
    assert len(fig.axes) == 2  # scores and advantages
    score_ax, adv_ax = fig.axes
    assert (score_ax.get_xlabel(), score_ax.get_ylabel()) == ("side A (a_score)", "side B (b_score)")
    assert (adv_ax.get_xlabel(), adv_ax.get_ylabel()) == ("side A (a_adv)", "side B (b_adv)")
    np.testing.assert_allclose(score_ax.collections[0].get_offsets(), scores[["a_score", "b_score"]].to_numpy())
    # residuals B - A: rule scores (1, 0, 0, 1) against (1, 0.5, 0, 1) -> 9 zeros and three 0.5s
    ax = parity.residual_figure(scores).axes[0]
    assert ax.get_xlabel() == "B score - A score" and ax.get_title().startswith("Residual B - A")
    assert sum(p.get_height() for p in ax.patches) == 12


def test_rank_flips_of_a_and_b(reward_folder):
    scores = pd.read_parquet(reward_folder / "scores.parquet")
    flips = parity.group_flips(scores)
    # A ties the wrong and the malformed answer (0, 0), B orders them (0.5 > 0): not opposite, no flip; both
    # pick the first right answer as best
    assert flips["flips"].tolist() == [0, 0, 0] and flips["pairs"].tolist() == [6, 6, 6]
    assert flips["top1_agree"].all()
    assert "verdict FAIL" in parity.rank_flip_figure(flips, "fail").axes[0].get_title()


def test_rlrm_report_draws_the_parity_figures_of_a_reward_folder(reward_folder, tmp_path):
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command("report")(report)
    app.callback()(lambda: None)  # keeps `report` a subcommand, as under `rlrm`
    result = CliRunner().invoke(app, ["report", str(reward_folder), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "wrote 3 figures" in result.output and "has no" not in result.output
    drawn = {p.stem for p in tmp_path.glob("*.png")}
    assert drawn == {"parity_scatter", "parity_residuals", "parity_rank_flips"}
    summary = (tmp_path / "summary.md").read_text()
    assert "| verdict | fail |" in summary and "| group_pearson |" in summary


def test_a_scores_file_of_neither_command_is_skipped_naming_both_layouts():
    scores = pd.DataFrame({"group_id": [0, 0], "x": [1.0, 2.0]})
    with pytest.raises(parity.FigureSkipped, match="legacy_score and loop_score .* nor a_score and b_score"):
        parity.scatter_figure(scores)
