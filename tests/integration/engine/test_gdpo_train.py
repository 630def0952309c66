"""GDPO in the step and in a training run: the step trains on component-normalised advantages, and a short
tiny-rule run with the components example (examples/rewards/components.py) logs every component."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from small_run import SMALL_RUN

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "rewards" / "components.py"


def test_gdpo_trains_end_to_end_and_logs_every_component(tmp_path, tiny_policy_path):
    profile = load_profile(
        "tiny-rule",
        [
            *SMALL_RUN,
            "trainer.total_steps=2",
            "reward.kind=custom",
            f"reward.custom.path={EXAMPLE}",
            "reward.component_weights={correct: 1.0, format: 0.2}",
            "algorithm.component_norm=gdpo",
            "logging.save_samples=true",
        ],
    )
    run_dir = start_run(profile, tmp_path / "gdpo")
    assert train(run_dir).last_step == 2
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] >= 1]
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    for row in rows:
        step_samples = [s for s in samples if s["step"] == row["step"]]
        for name in ("correct", "format"):
            seen = [s["reward_extra_info"]["reward_components"][name] for s in step_samples]
            assert set(seen) <= {0.0, 1.0}
            assert row[f"reward/component/{name}/mean"] == pytest.approx(sum(seen) / len(seen))
            assert 0.0 <= row[f"reward/component/{name}/rule_agreement"] <= 1.0
        assert row["reward/component_errors"] == 0 and row["reward/failures"] == 0
        # the score is the function's weighted sum; the advantages are whitened (token-weighted mean 0, not +-0.7)
        assert row["critic/score/mean"] == pytest.approx(
            row["reward/component/correct/mean"] + 0.2 * row["reward/component/format/mean"]
        )
        assert "actor/pg_loss" in row
