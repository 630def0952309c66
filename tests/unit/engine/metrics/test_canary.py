"""Canary verdicts by hand (rlrm/engine/metrics/canary.py), the items a run's canaries are made of
(rlrm/engine/canaries.py), and the profiles they refuse."""

from __future__ import annotations

import asyncio
import json
import math
from types import SimpleNamespace

import pytest

from rlrm.config.loader import load_profile
from rlrm.config.reward_guard import GuardConfig
from rlrm.engine.canaries import ATTACKS, Canaries, canary_threshold, check_canary_data
from rlrm.engine.data.synthetic import synthetic_splits
from rlrm.engine.metrics.canary import CanaryItem, judge_canaries
from rlrm.engine.rewards.base import RewardResult
from rlrm.engine.rewards.factory import make_composite_reward
from rlrm.engine.rewards.rule import make_rule_reward
from rlrm.engine.run_checks import check_inputs
from rlrm.errors import ConfigError

ITEMS = [
    CanaryItem("reference#0", must_reward=True),
    CanaryItem("key-colon#0", must_reward=False),
    CanaryItem("empty#0", must_reward=False),
    CanaryItem("wrong-answer#0", must_reward=False),
]


def test_a_reward_that_gets_every_canary_right_holds_and_its_first_check_has_no_drift():
    finding = judge_canaries(ITEMS, [1.0, 0.0, 0.1, 0.4], None, threshold=0.5, max_drift=0.2)
    assert finding.flips == [] and not finding.flagged
    assert finding.drift == 0.0 and finding.scored == 4 and finding.failed == 0
    assert finding.metrics() == {"guard/canary_flips": 0.0, "guard/canary_drift": 0.0, "guard/canary_failed": 0.0}
    assert finding.detail == "canaries hold"


def test_a_reference_not_rewarded_and_an_attack_rewarded_are_flips():
    # threshold 0.5: the reference's 0.4 is below it (flip), the colon's 0.5 is at it (rewarded: flip)
    finding = judge_canaries(ITEMS, [0.4, 0.5, 0.0, 0.0], None, threshold=0.5, max_drift=0.2)
    assert finding.flips == ["reference#0", "key-colon#0"] and finding.flagged
    assert "2 of 4 canaries flipped at threshold 0.5" in finding.detail
    assert "reference#0 scored 0.4 (not rewarded, must be)" in finding.detail
    assert "key-colon#0 scored 0.5 (rewarded, must not be)" in finding.detail


def test_drift_is_the_mean_absolute_change_from_the_first_check():
    baseline = [1.0, 0.0, 0.0, 0.2]
    # |0.9-1| + |0.3-0| + |0.1-0| + |0.4-0.2| = 0.1 + 0.3 + 0.1 + 0.2 = 0.7, over 4 items: 0.175 <= 0.2
    held = judge_canaries(ITEMS, [0.9, 0.3, 0.1, 0.4], baseline, threshold=0.5, max_drift=0.2)
    assert held.drift == pytest.approx(0.175) and not held.flagged
    # no flip, but 0.1 + 0.45 + 0.45 + 0.25 = 1.25 over 4: 0.3125 > 0.2
    moved = judge_canaries(ITEMS, [0.9, 0.45, 0.45, 0.45], baseline, threshold=0.5, max_drift=0.2)
    assert moved.flips == [] and moved.drift == pytest.approx(0.3125) and moved.drifted and moved.flagged
    assert moved.detail == "canary scores drifted 0.312 from the first check (max_canary_drift 0.2)"


def test_a_failed_canary_is_counted_never_read_as_a_verdict_or_a_drift():
    # item 1 failed now, item 2 failed at the first check: drift over items 0 and 3 only, (0 + 0.2) / 2
    finding = judge_canaries(ITEMS, [1.0, None, 0.0, 0.2], [1.0, 0.0, None, 0.0], threshold=0.5, max_drift=0.2)
    assert finding.failed == 1 and finding.scored == 3 and finding.flips == []
    assert finding.drift == pytest.approx(0.1)
    nothing = judge_canaries(ITEMS, [None] * 4, None, threshold=0.5, max_drift=0.2)
    assert nothing.failed == 4 and math.isnan(nothing.drift) and not nothing.flagged


def test_many_flips_name_the_first_few_and_count_the_rest():
    items = [CanaryItem(f"key-colon#{k}", must_reward=False) for k in range(6)]
    finding = judge_canaries(items, [1.0] * 6, None, threshold=0.5, max_drift=0.2)
    assert len(finding.flips) == 6 and finding.detail.endswith("and 2 more")


def test_the_canaries_of_a_run_are_each_problems_reference_and_five_attacks():
    profile = load_profile("tiny-genrm", ["reward.guard.on_canary=warn", "reward.guard.canaries=2"])
    _, test = synthetic_splits(profile.data.synthetic, profile.data.prompt_suffix)

    class Words:  # a tokenizer that counts words: only the lengths are read
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": text.split()}

    canaries = Canaries.build(profile, test, Words())
    names = [i.name for i in canaries.items]
    assert names == [f"{n}#{k}" for k in (0, 1) for n in ("reference", *ATTACKS)]
    assert [i.must_reward for i in canaries.items] == [True, False, False, False, False, False] * 2
    by_name = dict(zip(names, canaries.samples))
    assert by_name["reference#0"].solution_str == test[0].extra_info["solution"]
    assert by_name["key-colon#1"].solution_str == ":" and by_name["empty#0"].solution_str == ""
    assert by_name["empty#0"].response_length == 1  # the EOS alone
    assert by_name["wrong-answer#0"].solution_str.endswith(f"#### {int(test[0].ground_truth) + 1}")
    assert all(s.uid.startswith("canary/") for s in canaries.samples)
    assert canaries.threshold == 0.5  # a GenRM's normalised verdict
    assert Canaries.build(load_profile("tiny-genrm", ["reward.guard.on_canary=off"]), test, Words()) is None


def test_the_rule_is_judged_halfway_between_its_right_and_wrong_scores():
    rule = load_profile("tiny-rule", ["reward.score=1", "reward.format_score=0.2"]).reward
    assert canary_threshold(rule) == pytest.approx(0.6)


def test_an_unknown_canary_action_is_refused():
    with pytest.raises(ValueError, match="on_canary"):
        GuardConfig(on_canary="halt")
    with pytest.raises(ValueError, match="canary_every"):
        GuardConfig(canary_every=0)


def test_canaries_on_data_without_reference_solutions_are_refused_before_the_run(tmp_path):
    # verl-shaped rows carry the ground truth but no worked solution: there is no reference to hold the judge to
    for split in ("train", "test"):
        row = {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": "What is 2 + 3?"}],
            "reward_model": {"ground_truth": "5"},
            "extra_info": {"index": 0},
        }
        (tmp_path / f"{split}.jsonl").write_text(json.dumps(row) + "\n")
    overrides = ["data.source=gsm8k", f"data.path={tmp_path}", "data.train_split=train", "data.test_split=test"]
    profile = load_profile("tiny-genrm", [*overrides, "reward.guard.on_canary=warn"])
    with pytest.raises(ConfigError, match=r"reward.guard.on_canary=warn needs the reference solutions of 2 held-out "):
        check_inputs(profile)
    check_inputs(load_profile("tiny-genrm", [*overrides, "reward.guard.on_canary=off"]))  # off: nothing to check
    few = load_profile("tiny-genrm", ["reward.guard.on_canary=stop", "reward.guard.canaries=3"])
    _, test = synthetic_splits(few.data.synthetic, few.data.prompt_suffix)
    with pytest.raises(ConfigError, match="but 2 held-out problems"):
        check_canary_data(few, test[:2])


class _Words:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": text.split()}


def test_canaries_a_composite_gate_keeps_from_the_judge_are_not_rewarded_never_failed():
    # they were counted in guard/canary_failed (10 of 12 on every check), though nothing failed
    profile = load_profile(
        "tiny-genrm", ["reward.kind=composite", "reward.composite.mode=gate", "reward.guard.on_canary=warn"]
    )
    cfg = profile.reward
    _, test = synthetic_splits(profile.data.synthetic, profile.data.prompt_suffix)
    canaries = Canaries.build(profile, test, _Words())

    async def judge(sample):  # a judge that rewards everything: the gate alone keeps the attacks from it
        return RewardResult(1.0, {})

    fn = make_composite_reward(cfg, make_rule_reward(cfg), judge)

    async def nothing():
        return None

    service = SimpleNamespace(loop=SimpleNamespace(fn=fn), wake=nothing, sleep=nothing)
    finding, metrics = asyncio.run(canaries.check(service))
    # nothing failed: every attack got the composite's score (the rule's 0, gated), i.e. "not rewarded",
    # as `rlrm audit reward` counts a gated sample (docs: "a sample the gate keeps from the model is not rewarded")
    assert metrics["guard/canary_failed"] == 0.0, metrics
    assert finding.scored == 12 and finding.flips == []
