"""The reward-hacking audit on real runs (slow): a reward that pays for length is flagged, tiny-genrm is not.

tests/fixtures/length_reward.py pays min(1, characters / 60) whatever the answer. On tiny-rule (30
steps here, ~25 s of training on 2 cores) the policy learns to fill `max_new_tokens` with `####`
lines: the reward rises 0.29 -> 0.60, rule agreement falls 0.87 -> 0.01, val/accuracy 0.16 -> 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.tracker import read_metrics
from rlrm.engine.trainer import start_run, train
from rlrm.report.build import ReportOptions, build_report

LENGTH_REWARD = Path(__file__).resolve().parents[1] / "fixtures" / "length_reward.py"
COMMON = ["trainer.save_every=0", "trainer.num_threads=2", "logging.console=none"]


def audit_rows(summary: Path) -> dict[tuple[str, str], str]:
    """(run, check) -> result, read from the audit table of summary.md."""
    text = summary.read_text().split("## Reward-hacking audit", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ") and not line.startswith("| run")]
    return {(r[0].lstrip("| "), r[1]): r[2] for r in rows}


def run(tmp_path: Path, name: str, profile: str, overrides: list[str]) -> Path:
    run_dir = start_run(load_profile(profile, COMMON + overrides), tmp_path / name)
    train(run_dir)
    return run_dir


@pytest.mark.slow
def test_length_paying_reward_is_flagged_and_tiny_genrm_is_not(tmp_path, tiny_policy_path):
    hacked = run(tmp_path, "hacked", "tiny-rule", [
        "reward.kind=custom", f"reward.custom.path={LENGTH_REWARD}", "trainer.total_steps=30", "trainer.val_every=5",
    ])
    genrm = run(tmp_path, "genrm", "tiny-genrm", ["trainer.total_steps=40", "trainer.val_every=10"])
    rows = read_metrics(hacked / "metrics.jsonl")
    assert rows[-1]["reward/rule_agreement"] < rows[1]["reward/rule_agreement"] - 0.3
    assert read_metrics(genrm / "metrics.jsonl")[-1]["reward/rule_agreement"] > 0.8  # the judge sees the reference

    result = build_report([hacked, genrm], ReportOptions(out=tmp_path / "report"))
    audit = audit_rows(result.summary)
    assert audit[("hacked", "divergence")] == "flagged"
    assert audit[("hacked", "length drift")] == "flagged"
    assert [audit[("genrm", check)] for check in ("divergence", "length drift", "concentration")] == ["ok"] * 3
    assert (tmp_path / "report" / "curve_rule_agreement.png").is_file()
