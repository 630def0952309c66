"""Agreement of a model reward with the rule (rlrm/engine/rewards/agreement.py): thresholds, signs and step metrics."""

from __future__ import annotations

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.agreement import agreement_metrics, rule_agreement, top_share, verdict_threshold
from rlrm.engine.rewards.base import RewardResult, RewardSample


def sample(response: str, truth: str = "5", i: int = 0) -> RewardSample:
    return RewardSample(
        uid=f"p{i}",
        index=i,
        data_source="synthetic",
        prompt=[{"role": "user", "content": "q"}],
        solution_str=response,
        ground_truth=truth,
    )


RIGHT, WRONG = "2 + 3 = 5 #### 5", "2 + 3 = 6 #### 6"


def test_thresholds_by_kind_and_configured():
    assert verdict_threshold(RewardConfig(kind="rule")) is None
    assert verdict_threshold(RewardConfig(kind="disrm", server={"model": "m"})) == 0.0
    assert verdict_threshold(RewardConfig(kind="genrm", server={"model": "m"})) == 0.5
    assert (
        verdict_threshold(RewardConfig(kind="composite", server={"model": "m"}, composite={"model_kind": "disrm"}))
        == 0.0
    )
    assert verdict_threshold(RewardConfig(kind="genrm", server={"model": "m"}, agreement_threshold=0.8)) == 0.8


def test_disrm_logits_agree_by_sign():
    cfg = RewardConfig(kind="disrm", server={"model": "m"})
    pairs = [
        (sample(RIGHT), RewardResult(2.5)),  # right, logit > 0: agree
        (sample(RIGHT), RewardResult(-0.1)),  # right, logit < 0: disagree
        (sample(WRONG), RewardResult(-3.0)),  # wrong, < 0: agree
        (sample(WRONG), RewardResult(0.0)),  # wrong, exactly at the threshold counts as "correct": disagree
        (sample(RIGHT), None),  # dropped: not compared
        (sample(RIGHT), RewardResult(0.0, {"reward_failed": True})),  # defaulted: not compared
        (sample(RIGHT, truth=""), RewardResult(1.0)),  # no ground truth: not compared
    ]
    assert rule_agreement(cfg, pairs) == (0.5, 4)


def test_genrm_half_marks_and_rule_is_absent():
    cfg = RewardConfig(kind="genrm", server={"model": "m"})
    pairs = [(sample(RIGHT), RewardResult(1.0)), (sample(WRONG), RewardResult(1.0)), (sample(WRONG), RewardResult(0.2))]
    assert rule_agreement(cfg, pairs) == (pytest.approx(2 / 3), 3)
    assert rule_agreement(RewardConfig(kind="rule"), pairs) is None
    assert "reward/rule_agreement" not in agreement_metrics(RewardConfig(kind="rule"), pairs)


def test_composite_is_judged_by_its_model_part():
    weighted = RewardConfig(kind="composite", server={"model": "m"})
    # weighted score 0.5*1 + 0.5*0 = 0.5 would pass 0.5; the model said 0: disagree with the rule (right)
    pairs = [(sample(RIGHT), RewardResult(0.5, {"rule_score": 1.0, "model_score": 0.0}))]
    assert rule_agreement(weighted, pairs) == (0.0, 1)
    gate = RewardConfig(kind="composite", server={"model": "m"}, composite={"mode": "gate"})
    pairs = [
        (sample(WRONG), RewardResult(0.0, {"gated": True})),  # the model never saw it
        (sample(RIGHT), RewardResult(1.0, {"gated": False})),
    ]  # model says right, rule says right
    assert rule_agreement(gate, pairs) == (1.0, 1)


def test_top_share_hand_checked():
    # docstring example: 100 samples, 8 score 1, 2 score 11: the top 1 holds 11 of 30
    assert top_share([0] * 90 + [1] * 8 + [11] * 2) == pytest.approx(11 / 30)
    # binary with enough rewarded samples: 10 of 12 at 1 -> top 1 of 12 samples holds 1 / 10
    assert top_share([0, 0] + [1] * 10) == pytest.approx(0.1)
    # shift and scale do not matter: logits 5 + 3x read the same
    assert top_share([5 + 3 * s for s in [0, 0] + [1] * 10]) == pytest.approx(0.1)
    # 300 samples: the top ceil(3) of 3 outliers at 100 and 297 at ~U(0, 1) (mean 0.5) hold 300 / 448.5
    assert top_share([0.0] + [i / 295 for i in range(1, 297)] + [100.0] * 3) == pytest.approx(
        300 / (300 + 148), rel=1e-2
    )
    # sparse: 200 samples (top 2) but only 9 above the minimum, fewer than 5 x 2 -> no figure
    assert top_share([0] * 191 + [1] * 9) is None
    assert top_share([0] * 190 + [1] * 10) == pytest.approx(0.2)  # at the edge: binary gives 2 / 10


def test_metrics_of_a_step():
    cfg = RewardConfig(kind="genrm", server={"model": "m"})
    pairs = [(sample(RIGHT if i % 2 else WRONG, i=i), RewardResult(float(i % 2))) for i in range(24)]
    m = agreement_metrics(cfg, pairs)
    # 24 samples: the top 1 of the 12 scored 1 holds 1 / 12
    assert m == {
        "reward/rule_agreement": 1.0,
        "reward/rule_agreement_samples": 24,
        "reward/top1pct_share": pytest.approx(1 / 12),
    }


def test_the_step_row_carries_them_in_every_mode():
    """GRPOStep.finish, which every scheduling mode calls, writes the numbers from the step's samples."""
    from rlrm.engine.step import GRPOStep, Scored, StepRecord, StepSettings

    settings = StepSettings(
        n=2,
        pad_token_id=0,
        device="cpu",
        adv_eps=1e-6,
        norm_adv_by_std=True,
        recompute_old_log_prob="never",
        reward=RewardConfig(kind="disrm", server={"model": "m"}),
    )
    triples = [(sample(RIGHT, i=0), RewardResult(1.0), None), (sample(WRONG, i=1), RewardResult(1.0), None)]
    record = StepRecord(step=1, scored=[Scored(None, [], 1)], completions=[], samples=triples)
    row = GRPOStep(None, None, settings).finish(record).metrics
    assert row["reward/rule_agreement"] == 0.5 and row["reward/rule_agreement_samples"] == 2
    rule = StepSettings(**{**settings.__dict__, "reward": RewardConfig()})
    assert "reward/rule_agreement" not in GRPOStep(None, None, rule).finish(record).metrics
