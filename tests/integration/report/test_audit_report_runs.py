"""The audit on real runs: a length-paying custom reward is flagged and tiny-genrm is not (slow: two training runs;
the audit on written metrics is in tests/unit/report/test_audit_report.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train
from rlrm.report.build import ReportOptions, build_report
from tests.unit.report.test_audit_report import CHECKS, COMMON, LENGTH_REWARD, audit_rows


def run(tmp_path: Path, name: str, profile: str, overrides: list[str]) -> Path:
    run_dir = start_run(load_profile(profile, COMMON + overrides), tmp_path / name)
    train(run_dir)
    return run_dir


@pytest.mark.slow
def test_length_paying_reward_is_flagged_and_tiny_genrm_is_not(tmp_path, tiny_policy_path):
    hacked = run(
        tmp_path,
        "hacked",
        "tiny-rule",
        [
            "reward.kind=custom",
            f"reward.custom.path={LENGTH_REWARD}",
            "trainer.total_steps=30",
            "trainer.val_every=5",
        ],
    )
    genrm = run(tmp_path, "genrm", "tiny-genrm", ["trainer.total_steps=40", "trainer.val_every=10"])
    rows = read_metrics(hacked / "metrics.jsonl")
    held_out = [row["val/accuracy"] for row in rows if "val/accuracy" in row]
    assert held_out[-1] < held_out[0] - 0.2  # the hack happened: the policy stopped answering right
    # The tiny policy's answers stay under the length reward's 0.5 verdict (30 characters), so reward and rule both
    # say "wrong" more and more often: agreement rises as accuracy falls (0.76 -> 0.98 at 0.305 -> 0 when written).
    # The audit flags the run by val/accuracy then (docs/validating-rewards.md says to read the two together).
    assert read_metrics(genrm / "metrics.jsonl")[-1]["reward/rule_agreement"] > 0.8  # the judge sees the reference

    result = build_report([hacked, genrm], ReportOptions(out=tmp_path / "report"))
    audit = audit_rows(result.summary)
    assert audit[("hacked", "divergence")] == "flagged"
    assert "while val/accuracy went" in result.summary.read_text()
    assert audit[("hacked", "length drift")] == "flagged"
    assert [audit[("genrm", check)] for check in CHECKS] == ["ok"] * 3
    assert (tmp_path / "report" / "curve_rule_agreement.png").is_file()
