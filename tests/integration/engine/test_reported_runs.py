"""A custom reward that reports numbers beside its score, as verl's docs show ({"score", "acc", "pred"}): each number
becomes a per-step metric (reward/reported/<name>/mean), text stays in samples.jsonl."""

from __future__ import annotations

import json

import pytest
from small_run import SMALL_RUN

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train

REWARD = """
import re


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    found = re.findall(r"-?\\d+", solution_str)
    pred = found[-1] if found else ""
    acc = pred == str(ground_truth).strip()
    return {"score": 1.0 if acc else 0.0, "acc": acc, "length": len(solution_str), "pred": pred}
"""


def test_the_numbers_a_custom_reward_reports_are_step_metrics(tmp_path, tiny_policy_path):
    path = tmp_path / "reward.py"
    path.write_text(REWARD)
    profile = load_profile(
        "tiny-rule",
        [*SMALL_RUN, "trainer.total_steps=2", "reward.kind=custom", f"reward.custom.path={path}"]
        + ["logging.save_samples=true"],
    )
    run_dir = start_run(profile, tmp_path / "run")
    assert train(run_dir).last_step == 2
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] >= 1]
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    for row in rows:
        info = [s["reward_extra_info"] for s in samples if s["step"] == row["step"]]
        assert info and all(i["reported_keys"] == ["acc", "length"] for i in info)  # "pred" is text
        assert row["reward/reported/acc/mean"] == pytest.approx(sum(i["acc"] for i in info) / len(info))
        assert row["reward/reported/acc/mean"] == pytest.approx(row["critic/score/mean"])
        assert row["reward/reported/length/mean"] == pytest.approx(sum(i["length"] for i in info) / len(info))
        assert not any(key.startswith("reward/reported/pred") for key in row)
