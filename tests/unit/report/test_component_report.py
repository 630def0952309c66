"""Reward components in `rlrm report`: a curve per component, and the audit watching each component's agreement
with the rule (a component whose agreement falls while the reward rises is flagged as divergence)."""

from __future__ import annotations

import json

from test_audit_report import audit_rows

from rlrm.engine.metrics.audit import check_divergence
from rlrm.report.build import ReportOptions, build_report

STEPS = list(range(1, 13))


def rows(format_agreement):
    # the reward rises 0.02 a step; correct keeps agreeing with the rule, format's agreement follows `format_agreement`
    return [
        {
            "step": s,
            "critic/score/mean": 0.2 + 0.02 * s,
            "response_length/mean": 10.0,
            "reward/component/correct/mean": 0.1 + 0.01 * s,
            "reward/component/correct/min": 0.0,
            "reward/component/correct/max": 1.0,
            "reward/component/format/mean": 0.5 + 0.03 * s,
            "reward/component/correct/rule_agreement": 1.0,
            "reward/component/format/rule_agreement": format_agreement(s),
        }
        for s in STEPS
    ]


def write(path, metric_rows):
    path.mkdir(parents=True)
    (path / "config.yaml").write_text("trainer:\n  mode: sync\n")
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metric_rows))
    return path


def test_a_component_drifting_from_the_rule_is_flagged_and_each_component_is_drawn(tmp_path):
    hacked = write(tmp_path / "hacked", rows(lambda s: 0.9 - 0.05 * s))
    honest = write(tmp_path / "honest", rows(lambda s: 0.9 + 0.001 * (s % 2)))
    result = build_report([hacked, honest], ReportOptions(out=tmp_path / "report"))
    audit = audit_rows(result.summary)
    assert audit[("hacked", "divergence")] == "flagged" and audit[("honest", "divergence")] == "ok"
    assert "reward/component/format/rule_agreement went 0.85 -> 0.3" in result.summary.read_text()
    names = {p.name for p in result.files}
    assert {"curve_reward-component-correct-mean.png", "curve_reward-component-format-mean.png"} <= names


def test_without_component_series_the_divergence_check_is_unchanged():
    series = {"critic/score/mean": (STEPS, [0.2 + 0.02 * s for s in STEPS])}
    assert check_divergence(series).status == "n/a"
    series["reward/component/format/rule_agreement"] = (STEPS, [0.9 - 0.05 * s for s in STEPS])
    assert check_divergence(series).flagged
