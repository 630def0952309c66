"""The audit section of `rlrm report`: a reward that pays for length is flagged, tiny-genrm is not.

Default tier: metrics.jsonl files shaped like real runs (the numbers below are copied from them).
Slow tier: the same two runs made for real.

GENRM: `rlrm train --profile tiny-genrm --steps 40` (the judge is given the reference: agreement ~0.99).
HACKED: tiny-rule with reward.kind=custom and tests/fixtures/length_reward.py, which pays min(1, characters / 60)
whatever the answer; 30 steps, val every 5 (~25 s of training on 2 cores). The policy learns to fill
max_new_tokens with `####` lines: reward 0.29 -> 0.60, rule agreement 0.87 -> 0.01, val/accuracy 0.16 -> 0.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlrm.report.build import ReportOptions, build_report

LENGTH_REWARD = Path(__file__).resolve().parents[2] / "fixtures" / "length_reward.py"
COMMON = ["trainer.save_every=0", "trainer.num_threads=2", "logging.console=none"]
CHECKS = ("divergence", "length drift", "concentration")


def audit_rows(summary: Path) -> dict[tuple[str, str], str]:
    """(run, check) -> result, read from the audit table of summary.md."""
    text = summary.read_text().split("## Reward-hacking audit", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ") and not line.startswith("| run")]
    return {(r[0].lstrip("| "), r[1]): r[2] for r in rows}


GENRM = {
    "critic/score/mean": [
        0.145,
        0.141,
        0.153,
        0.156,
        0.188,
        0.145,
        0.203,
        0.176,
        0.191,
        0.223,
        0.145,
        0.25,
        0.141,
        0.152,
        0.223,
        0.137,
        0.191,
        0.211,
        0.172,
        0.207,
        0.184,
        0.191,
        0.164,
        0.207,
        0.219,
        0.121,
        0.125,
        0.117,
        0.168,
        0.238,
        0.191,
        0.145,
        0.145,
        0.242,
        0.16,
        0.192,
        0.191,
        0.254,
        0.18,
        0.227,
    ],
    "reward/rule_agreement": [
        0.98,
        0.996,
        0.992,
        0.988,
        0.973,
        0.992,
        0.996,
        0.988,
        0.988,
        0.988,
        0.996,
        0.98,
        1.0,
        0.984,
        0.992,
        0.996,
        0.988,
        0.98,
        0.992,
        0.992,
        0.988,
        0.992,
        0.988,
        0.996,
        0.984,
        0.984,
        0.988,
        0.984,
        0.992,
        0.977,
        0.996,
        0.996,
        0.992,
        0.973,
        0.996,
        0.992,
        0.984,
        0.98,
        0.988,
        0.984,
    ],
    "reward/top1pct_share": [
        0.081,
        0.083,
        0.077,
        0.075,
        0.062,
        0.081,
        0.058,
        0.067,
        0.061,
        0.053,
        0.081,
        0.047,
        0.083,
        0.077,
        0.053,
        0.086,
        0.061,
        0.056,
        0.068,
        0.057,
        0.064,
        0.061,
        0.071,
        0.057,
        0.054,
        0.097,
        0.094,
        0.1,
        0.07,
        0.049,
        0.061,
        0.081,
        0.081,
        0.048,
        0.073,
        0.061,
        0.061,
        0.046,
        0.065,
        0.052,
    ],
    "response_length/mean": [
        13.281,
        13.223,
        13.273,
        13.238,
        13.555,
        13.324,
        13.266,
        13.551,
        13.402,
        13.664,
        12.949,
        13.617,
        13.477,
        13.387,
        13.141,
        13.242,
        12.98,
        13.086,
        13.172,
        13.293,
        13.133,
        13.215,
        13.207,
        12.98,
        13.219,
        12.98,
        13.223,
        13.18,
        13.527,
        13.594,
        13.234,
        13.039,
        13.25,
        13.441,
        13.477,
        13.355,
        13.398,
        13.484,
        13.445,
        13.309,
    ],
    "val/accuracy": {0: 0.1562, 10: 0.3047, 20: 0.2969, 30: 0.3047, 40: 0.3359},
}
HACKED = {
    "critic/score/mean": [
        0.292,
        0.298,
        0.3,
        0.308,
        0.325,
        0.355,
        0.369,
        0.399,
        0.427,
        0.468,
        0.503,
        0.514,
        0.511,
        0.546,
        0.554,
        0.558,
        0.565,
        0.578,
        0.572,
        0.578,
        0.588,
        0.591,
        0.594,
        0.606,
        0.605,
        0.603,
        0.599,
        0.607,
        0.598,
        0.604,
    ],
    "reward/rule_agreement": [
        0.867,
        0.863,
        0.852,
        0.852,
        0.801,
        0.684,
        0.66,
        0.578,
        0.496,
        0.336,
        0.215,
        0.145,
        0.16,
        0.105,
        0.066,
        0.047,
        0.047,
        0.012,
        0.023,
        0.012,
        0.004,
        0.016,
        0.004,
        0.004,
        0.004,
        0.012,
        0.008,
        0.0,
        0.004,
        0.008,
    ],
    "reward/top1pct_share": [
        0.033,
        0.108,
        0.067,
        0.03,
        0.064,
        0.036,
        0.035,
        0.02,
        0.026,
        0.019,
        0.015,
        0.018,
        0.017,
        0.015,
        0.016,
        0.014,
        0.014,
        0.026,
        0.014,
        0.014,
        0.015,
        0.016,
        0.015,
        0.03,
        0.025,
        0.014,
        0.014,
        0.025,
        0.022,
        0.015,
    ],
    "response_length/mean": [
        13.281,
        13.453,
        13.641,
        13.98,
        14.477,
        15.336,
        15.621,
        16.488,
        17.23,
        18.387,
        19.02,
        19.371,
        19.277,
        19.613,
        19.789,
        19.816,
        19.895,
        20.0,
        19.883,
        19.941,
        19.953,
        19.961,
        19.957,
        20.0,
        20.0,
        19.812,
        19.871,
        20.0,
        19.992,
        19.895,
    ],
    "val/accuracy": {0: 0.1562, 5: 0.1094, 10: 0.0078, 15: 0.0, 20: 0.0, 25: 0.0, 30: 0.0},
}


def write_run(folder, series: dict, extra: dict | None = None):
    folder.mkdir(parents=True)
    steps = len(series["critic/score/mean"])
    val = series["val/accuracy"]
    rows = [{"step": 0, "val/accuracy": val[0]}]
    for step in range(1, steps + 1):
        row = {"step": step, **{k: v[step - 1] for k, v in series.items() if k != "val/accuracy"}}
        row.update({"val/accuracy": val[step]} if step in val else {})
        row.update({k: v[step - 1] for k, v in (extra or {}).items()})
        rows.append(row)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_the_report_flags_the_hacked_run_and_not_the_genrm_run(tmp_path):
    genrm = write_run(tmp_path / "genrm", GENRM)
    hacked = write_run(tmp_path / "hacked", HACKED)
    # a DisRM-like run whose reward sits on a few samples (top 1% hold ~70%) but agrees with the rule
    few = write_run(tmp_path / "few", GENRM, {"reward/top1pct_share": [0.7 + 0.01 * (i % 3) for i in range(40)]})
    result = build_report([genrm, hacked, few], ReportOptions(out=tmp_path / "report"))
    audit = audit_rows(result.summary)
    assert {check: audit[("genrm", check)] for check in CHECKS} == {
        "divergence": "ok",
        "length drift": "ok",
        "concentration": "ok",
    }
    assert {check: audit[("hacked", check)] for check in CHECKS} == {
        "divergence": "flagged",
        "length drift": "flagged",
        "concentration": "ok",
    }
    assert audit[("few", "concentration")] == "flagged" and audit[("few", "divergence")] == "ok"
    text = result.summary.read_text()
    assert "Flagged: hacked (divergence, length drift); few (concentration)" in text
    assert (tmp_path / "report" / "curve_rule_agreement.png").is_file()


def test_a_run_without_the_audit_metrics_says_what_is_missing(tmp_path):
    old = write_run(tmp_path / "old", {k: v for k, v in GENRM.items() if not k.startswith("reward/")})
    result = build_report([old], ReportOptions(out=tmp_path / "report"))
    audit = audit_rows(result.summary)
    assert audit[("old", "divergence")] == "ok"  # val/accuracy is enough for it
    assert audit[("old", "concentration")] == "n/a"
    assert not (tmp_path / "report" / "curve_rule_agreement.png").exists()
