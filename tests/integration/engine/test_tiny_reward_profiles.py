"""One GRPO step of tiny-genrm / tiny-disrm through the served tiny reward models (slow; the models themselves are
checked in tests/unit/engine/models/test_tiny_models.py)."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["genrm", "disrm"])
def test_tiny_reward_profiles_score_rl_samples_like_the_rule(kind, tmp_path):
    """One GRPO step of tiny-genrm / tiny-disrm through the served model: its scores rank the rule's verdicts."""
    from typer.testing import CliRunner

    from rlrm.cli.main import app
    from rlrm.engine.models.tiny import resolve_model_path
    from rlrm.engine.models.tiny_pairs import roc_auc
    from rlrm.engine.rewards.gsm8k import compute_score

    resolve_model_path("tiny:judge" if kind == "genrm" else "tiny:disrm")  # shipped: found, or built on first use
    run = tmp_path / "run"
    args = [
        "train",
        "--profile",
        f"tiny-{kind}",
        "--steps",
        "1",
        "--out",
        str(run),
        "--console",
        "plain",
        "--set",
        "logging.save_samples=true",
        "--set",
        "trainer.val_before_train=false",
        "--set",
        "trainer.num_threads=1",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    metrics = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    # The tiny judge leaves about 0.2% of its verdicts unparsed (20 of 10,240 over a 40-step run):
    # those, and only those, may fail, each counted and defaulted (on_failure: default).
    failed = metrics["reward/failures"]
    assert failed == metrics["reward/unparsed"] == metrics["reward/defaulted"] and failed <= 0.01 * len(rows)
    rows = [r for r in rows if not r["reward_extra_info"].get("reward_failed")]  # the defaulted ones score no verdict
    rule = [int(compute_score(r["response"], r["ground_truth"]) == 1.0) for r in rows]
    assert roc_auc([r["score"] for r in rows], rule) >= 0.9  # measured 0.99 (genrm) and 0.998 (disrm) over 3 steps
