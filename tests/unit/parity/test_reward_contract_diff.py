"""What differs between two reward setups (rlrm/parity/contract_diff.py): settings and contract parts."""

from __future__ import annotations

from rlrm.config.loader import load_profile
from rlrm.engine.rewards.contract import reward_contract
from rlrm.parity.contract_diff import contract_diff, setting_changes

JUDGE = {"name": "tiny:judge", "path": "/models/judge", "weights": "sha256:1111"}


def test_a_changed_template_is_a_setting_and_a_contract_part():
    a = load_profile("tiny-genrm").reward
    b = load_profile("tiny-genrm", ["reward.genrm.template=Q: {question} A: {response}"]).reward
    assert setting_changes(a, b) == ["reward.genrm.template"]
    diff = contract_diff(reward_contract(a, JUDGE), reward_contract(b, JUDGE))
    # the new template no longer shows {reference}: the reference handling changed with it
    assert not diff["same"] and diff["parts"] == ["reference", "template"]
    assert diff["a"] != diff["b"] and len(diff["a"]) == 64
    assert "reference.judge_sees ('true' -> 'false')" in diff["changes"]
    assert any(
        c.startswith("template ('Is the answer") and "'Q: {question} A: {response}')" in c for c in diff["changes"]
    )


def test_a_setting_that_decides_no_score_leaves_the_contract_alone():
    a = load_profile("tiny-genrm").reward
    b = load_profile("tiny-genrm", ["reward.num_workers=2", "reward.max_retries=7"]).reward
    assert setting_changes(a, b) == ["reward.max_retries", "reward.num_workers"]
    diff = contract_diff(reward_contract(a, JUDGE), reward_contract(b, JUDGE))
    assert diff["same"] and diff["parts"] == [] and diff["changes"] == [] and diff["a"] == diff["b"]


def test_rebuilt_weights_change_the_contract_with_no_setting_changed():
    a = load_profile("tiny-genrm").reward
    diff = contract_diff(reward_contract(a, JUDGE), reward_contract(a, {**JUDGE, "weights": "sha256:2222"}))
    assert setting_changes(a, a) == []
    # the model part is told leaf by leaf: where it differs, not a shared first few characters
    assert diff["parts"] == ["model"] and diff["changes"] == ["model.weights ('sha256:1111' -> 'sha256:2222')"]


def test_a_hosted_judge_differs_in_model_and_dtype():
    a = load_profile("tiny-genrm").reward
    b = load_profile(
        "tiny-genrm", ["reward.server.addresses=http://127.0.0.1:9/v1", "reward.server.model=standin-judge"]
    ).reward
    assert {"reward.server.addresses", "reward.server.model"} <= set(setting_changes(a, b))
    hosted = {"name": "standin-judge", "served": {"id": "standin-judge", "object": "model"}}
    diff = contract_diff(reward_contract(a, JUDGE), reward_contract(b, hosted))
    assert diff["parts"] == ["dtype", "model"]
    assert "dtype.dtype ('float32' -> 'null')" in diff["changes"]


def test_two_templates_that_share_a_beginning_are_shown_where_they_part():
    a = load_profile("tiny-genrm").reward
    shared = a.genrm.template.split("Reference answer:")[0]  # 'Is the answer ... Answer: {response}\n'
    b = load_profile("tiny-genrm", [f"reward.genrm.template={shared}Say Score: 10 or Score: 0."]).reward
    changes = contract_diff(reward_contract(a, JUDGE), reward_contract(b, JUDGE))["changes"]
    cut = len(shared) - 12
    assert changes[1] == (
        f"template (from character {cut}: '... {{response}}\\nReference answer: {{reference...' -> "
        "'... {response}\\nSay Score: 10 or Score: 0.')"
    )
