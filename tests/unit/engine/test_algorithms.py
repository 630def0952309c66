"""GRPO maths against hand-computed values (each expected number is derived in a comment)."""

from __future__ import annotations

import math

import pytest
import torch

from rlrm.engine.algorithms import (
    aggregate_loss,
    entropy_from_logits,
    grpo_advantages,
    kl_penalty,
    masked_mean,
    policy_loss,
)


def test_grpo_advantages_two_groups():
    # group 0: [1, 0, 1] mean 2/3, unbiased var = ((1/3)^2*2 + (2/3)^2)/2 = (2/9 + 4/9)/2 = 1/3
    #   std = 0.57735 -> advantages [0.57735, -1.1547, 0.57735]
    # group 1: [0, 0] mean 0, std 0 -> 0 / (0 + eps) = 0
    adv = grpo_advantages([1.0, 0.0, 1.0, 0.0, 0.0], [0, 0, 0, 1, 1])
    expected = torch.tensor([1 / 3 / math.sqrt(1 / 3), -2 / 3 / math.sqrt(1 / 3), 1 / 3 / math.sqrt(1 / 3), 0.0, 0.0])
    assert torch.allclose(adv, expected, atol=1e-5)


def test_grpo_group_of_one_and_hashable_ids():
    # a group of one: mean 0, std 1 -> advantage = score / (1 + eps)
    adv = grpo_advantages([0.7, 2.0, 4.0], ["a", "b", "b"])
    # group "b": [2, 4] mean 3, unbiased std sqrt(2) -> [-1/sqrt2, 1/sqrt2]
    assert torch.allclose(adv, torch.tensor([0.7, -1 / math.sqrt(2), 1 / math.sqrt(2)]), atol=1e-5)


def test_dr_grpo_does_not_divide():
    # norm_by_std=False: score - group mean -> [1-2/3, -2/3, 1-2/3]
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([5, 5, 5]), norm_by_std=False)
    assert torch.allclose(adv, torch.tensor([1 / 3, -2 / 3, 1 / 3]), atol=1e-6)


def test_groups_need_not_be_contiguous():
    adv = grpo_advantages([1.0, 5.0, 0.0, 5.0], [0, 1, 0, 1])
    # group 0: [1, 0] mean .5 std sqrt(.5) -> +-0.7071; group 1: equal scores -> 0
    assert torch.allclose(adv, torch.tensor([0.70711, 0.0, -0.70711, 0.0]), atol=1e-4)


MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
LOSS = torch.tensor([[1.0, 2.0, 100.0], [3.0, 100.0, 100.0], [100.0, 100.0, 100.0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 3) / 3),  # 3 valid tokens
        ("seq-mean-token-sum", ((1 + 2) + 3) / 2),  # row 3 fully masked: left out
        ("seq-mean-token-mean", ((1 + 2) / 2 + 3 / 1) / 2),  # (1.5 + 3) / 2
        ("seq-mean-token-sum-norm", (1 + 2 + 3) / 3),  # sum of sequence sums / T (T = 3 columns)
    ],
)
def test_aggregate_loss_modes(mode, expected):
    assert aggregate_loss(LOSS, MASK, mode).item() == pytest.approx(expected)


def test_aggregate_loss_rejects_unknown_mode():
    with pytest.raises(ValueError, match="token-mean"):
        aggregate_loss(LOSS, MASK, "mean")


def _lp(x):
    return torch.tensor([[math.log(x)]])


def test_policy_loss_on_policy_is_minus_advantage():
    # ratio 1: loss = -A, nothing clipped, kl 0
    loss, m = policy_loss(_lp(0.5), _lp(0.5), torch.tensor([2.0]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(-2.0)
    assert m["pg_clipfrac"] == 0.0 and m["ppo_kl"] == pytest.approx(0.0)


def test_policy_loss_clips_high_for_positive_advantage():
    # ratio = 0.9/0.5 = 1.8 > 1 + 0.2; A = 1: max(-1.8, -1.2) = -1.2, clipped
    loss, m = policy_loss(_lp(0.9), _lp(0.5), torch.tensor([1.0]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(-1.2)
    assert m["pg_clipfrac"] == 1.0
    # ppo_kl = mean(-log ratio) = -log 1.8
    assert m["ppo_kl"] == pytest.approx(-math.log(1.8), rel=1e-5)


def test_policy_loss_asymmetric_clip():
    # ratio 1.8 with clip_high 1.0: bound 2.0 not reached -> loss = -1.8, not clipped
    loss, m = policy_loss(_lp(0.9), _lp(0.5), torch.tensor([1.0]), torch.ones(1, 1), clip_low=0.2, clip_high=1.0)
    assert loss.item() == pytest.approx(-1.8, rel=1e-5)
    assert m["pg_clipfrac"] == 0.0
    # ratio 0.5/1.0... use ratio 0.5 with A = 1: max(-0.5, -0.8) = -0.5 (low side never binds for A > 0)
    loss, _ = policy_loss(_lp(0.25), _lp(0.5), torch.tensor([1.0]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(-0.5, rel=1e-5)


def test_policy_loss_dual_clip_bounds_negative_advantage():
    # ratio = e^3 ~ 20.1, A = -1: PPO loss max(20.1, 1.2) = 20.1; dual clip min(20.1, 3.0) = 3.0
    loss, m = policy_loss(torch.tensor([[0.0]]), torch.tensor([[-3.0]]), torch.tensor([-1.0]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(3.0)
    assert m["pg_clipfrac_lower"] == 1.0


def test_policy_loss_log_ratio_clamp_keeps_it_finite():
    # log ratio 1000 is clamped to 20: loss = -A * min(e^20, 1.2) = -1.2, finite gradient
    lp = torch.tensor([[1000.0]], requires_grad=True)
    loss, _ = policy_loss(lp, torch.tensor([[0.0]]), torch.tensor([1.0]), torch.ones(1, 1))
    loss.backward()
    assert math.isfinite(loss.item()) and torch.isfinite(lp.grad).all()


def test_policy_loss_masks_tokens_and_broadcasts():
    # token 2 is masked; token 1 on-policy with A=3 -> loss -3
    lp = torch.tensor([[-1.0, -50.0]])
    loss, _ = policy_loss(lp, torch.tensor([[-1.0, 0.0]]), torch.tensor([3.0]), torch.tensor([[1.0, 0.0]]))
    assert loss.item() == pytest.approx(-3.0)


def test_policy_loss_gradient_direction():
    # d loss / d log_prob = -A * ratio = -A on-policy: positive A pushes log_prob up
    lp = torch.tensor([[-1.0]], requires_grad=True)
    loss, _ = policy_loss(lp, torch.tensor([[-1.0]]), torch.tensor([2.0]), torch.ones(1, 1))
    loss.backward()
    assert lp.grad.item() == pytest.approx(-2.0)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        # log_prob = log .5, ref = log .25: diff = log 2 = 0.693147
        ("k1", math.log(2)),
        ("kl", math.log(2)),
        ("abs", math.log(2)),
        ("k2", 0.5 * math.log(2) ** 2),
        ("mse", 0.5 * math.log(2) ** 2),
        # k3: r = ref/p = 0.5; r - log r - 1 = 0.5 + 0.693147 - 1 = 0.193147
        ("k3", 0.5 + math.log(2) - 1),
        ("low_var_kl", 0.5 + math.log(2) - 1),
    ],
)
def test_kl_penalty_values(kind, expected):
    assert kl_penalty(_lp(0.5), _lp(0.25), kind).item() == pytest.approx(expected, rel=1e-5)


def test_kl_abs_is_symmetric_and_k3_clamped():
    assert kl_penalty(_lp(0.25), _lp(0.5), "abs").item() == pytest.approx(math.log(2), rel=1e-5)
    # huge gap: k3 clamps at 10
    assert kl_penalty(torch.tensor([[-30.0]]), torch.tensor([[0.0]]), "k3").item() == pytest.approx(10.0)


def test_kl_plus_suffix_takes_k2_gradient():
    # value of k3, gradient of k2: d/dlp 0.5 (lp - ref)^2 = lp - ref = log 2
    lp = _lp(0.5).requires_grad_(True)
    value = kl_penalty(lp, _lp(0.25), "k3+")
    value.backward()
    assert value.item() == pytest.approx(0.5 + math.log(2) - 1, rel=1e-5)
    assert lp.grad.item() == pytest.approx(math.log(2), rel=1e-5)


def test_kl_rejects_unknown_kind():
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_penalty(_lp(0.5), _lp(0.5), "k9")


def test_entropy_from_logits():
    # uniform over 4: entropy log 4; a one-hot-like distribution: ~0
    assert entropy_from_logits(torch.zeros(4)).item() == pytest.approx(math.log(4))
    assert entropy_from_logits(torch.tensor([100.0, 0.0, 0.0])).item() == pytest.approx(0.0, abs=1e-6)
    # p = [.5, .25, .25]: H = .5 ln2 + 2 * .25 ln4 = 1.5 ln 2
    logits = torch.log(torch.tensor([0.5, 0.25, 0.25]))
    assert entropy_from_logits(logits).item() == pytest.approx(1.5 * math.log(2), rel=1e-5)


def test_masked_mean():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    m = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    assert masked_mean(x, m).item() == pytest.approx((1 + 3 + 4) / 3)
    assert torch.allclose(masked_mean(x, m, dim=-1), torch.tensor([1.0, 3.5]))


def test_grpo_advantages_of_scores_near_float32s_range_are_finite_and_scale_free():
    """Squares of 1e30 overflow float32: the std is taken in float64, so a reward's scale does not matter."""
    small = grpo_advantages([1.0, 2.0, 3.0, 4.0], [0, 0, 0, 0])
    huge = grpo_advantages([1e30, 2e30, 3e30, 4e30], [0, 0, 0, 0])
    assert huge.dtype == torch.float32 and torch.allclose(huge, small, atol=1e-5)
    near = grpo_advantages([1e8 + 1, 1e8 + 2, 1e8 + 3, 1e8 + 4], [0, 0, 0, 0])  # a list: float64 from the start
    assert torch.allclose(near, small, atol=1e-5)
