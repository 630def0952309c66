"""GDPO advantages (rlrm/engine/gdpo.py): hand-computed values, and verl's formula written out from its source."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
import torch

from rlrm.engine.algorithms import grpo_advantages
from rlrm.engine.gdpo import gdpo_advantages, whiten_by_tokens

torch.set_num_threads(1)


def verl_gdpo(components, weights, index, lengths, width, epsilon=1e-6, norm_adv_by_std_in_grpo=True):
    """verl's GDPO, token level, re-written in the steps of its source (verl-project/verl 1dda039b):

    verl/trainer/ppo/core_algos.py::compute_gdpo_outcome_advantage places each component on the last valid
    response token of a [bs, T] tensor, runs compute_grpo_outcome_advantage on each (a per-uid loop: groups
    of one get mean 0 and std 1, torch.std is unbiased), sums them with gdpo_reward_weights, then
    verl/utils/torch_functional.py::masked_whiten(values, response_mask) * response_mask.
    Returns [bs, T].
    """
    bs = len(lengths)
    response_mask = torch.zeros(bs, width)
    for i, n in enumerate(lengths):
        response_mask[i, :n] = 1.0
    new_advantage = None
    for k in range(len(weights)):
        rm_scores = torch.zeros(bs, width)
        rm_scores[torch.arange(bs), torch.tensor(lengths) - 1] = torch.tensor(components[:, k], dtype=torch.float32)
        # compute_grpo_outcome_advantage
        scores = rm_scores.sum(dim=-1)
        id2score, id2mean, id2std = defaultdict(list), {}, {}
        for i in range(bs):
            id2score[index[i]].append(scores[i])
        for idx in id2score:
            if len(id2score[idx]) == 1:
                id2mean[idx], id2std[idx] = torch.tensor(0.0), torch.tensor(1.0)
            else:
                stacked = torch.stack(id2score[idx])
                id2mean[idx], id2std[idx] = torch.mean(stacked), torch.std(stacked)
        for i in range(bs):
            if norm_adv_by_std_in_grpo:
                scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
            else:
                scores[i] = scores[i] - id2mean[index[i]]
        normalized = scores.unsqueeze(-1) * response_mask
        term = weights[k] * normalized
        new_advantage = term if new_advantage is None else new_advantage + term
    # masked_whiten: masked_mean, masked_var(unbiased=True), (x - mean) * rsqrt(var + 1e-8)
    mean = (new_advantage * response_mask).sum() / (response_mask.sum() + 1e-8)
    var = ((new_advantage - mean) ** 2 * response_mask).sum() / (response_mask.sum() + 1e-8)
    var = var * response_mask.sum() / (response_mask.sum() - 1)
    return (new_advantage - mean) * torch.rsqrt(var + 1e-8) * response_mask


def test_hand_computed_two_groups():
    # components (correct, format), weights (1, 0.5); groups {0, 1} and {2, 3}; 3 response tokens each.
    # correct in group 0: [1, 0] -> mean 0.5, unbiased std sqrt(0.5) = 0.70711 -> +-0.5 / 0.70711 = +-0.70711;
    # correct in group 1: [0, 0] -> std 0 -> 0 / eps = 0. format in group 0: [1, 1] -> 0; in group 1: [1, 0] -> +-0.70711.
    # sum: [0.70711, -0.70711, 0.35355, -0.35355]; token mean 0; token variance 3 * (0.5 + 0.5 + 0.125 + 0.125) / 12
    # = 0.3125, x 12/11 (Bessel over 12 tokens) = 0.34091; rsqrt = 1.71270 -> [1.21106, -1.21106, 0.60553, -0.60553].
    components = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    adv = gdpo_advantages(components, [1.0, 0.5], [0, 0, 1, 1], torch.tensor([3, 3, 3, 3]))
    assert adv.tolist() == pytest.approx([1.21106, -1.21106, 0.60553, -0.60553], abs=1e-5)
    # GRPO on the weighted sum (1.5, 0.5 | 0.5, 0.0) gives both groups +-0.70711: the half-weighted format gap
    # counts as much as a correct answer; GDPO keeps it at half.
    summed = grpo_advantages(components @ torch.tensor([1.0, 0.5]), [0, 0, 1, 1])
    assert summed.tolist() == pytest.approx([0.70711, -0.70711, 0.70711, -0.70711], abs=1e-5)


def test_whitening_weighs_samples_by_their_tokens():
    # values [1, -1] with 3 and 1 tokens: token mean (3 - 1) / 4 = 0.5; deviations 0.5 (x3) and -1.5 (x1):
    # variance (0.75 + 2.25) / 4 = 0.75, x 4/3 = 1.0 -> [0.5, -1.5] / sqrt(1 + 1e-8).
    out = whiten_by_tokens(torch.tensor([1.0, -1.0]), torch.tensor([3, 1]))
    assert out.tolist() == pytest.approx([0.5, -1.5], abs=1e-6)


def test_all_equal_components_give_zero_not_nan():
    adv = gdpo_advantages(torch.ones(4, 2), [1.0, 1.0], [0, 0, 1, 1], torch.tensor([2, 2, 2, 2]))
    assert torch.isfinite(adv).all() and adv.abs().max() == 0


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_matches_verl_formula_on_random_batches(norm_by_std):
    rng = np.random.default_rng(0)
    for trial in range(5):
        groups = [0, 0, 0, 0, 1, 1, 1, 1, 2, 3, 3, 3]  # group 2 is a group of one
        bs, k = len(groups), 3
        components = rng.integers(0, 3, size=(bs, k)).astype(np.float32) * rng.uniform(0.5, 2.0, size=k)
        components[4:8, 1] = 1.0  # one component equal across a group (std 0)
        weights = list(rng.uniform(-1.0, 2.0, size=k))
        lengths = list(rng.integers(1, 9, size=bs))
        expected = verl_gdpo(components, weights, groups, lengths, width=8, norm_adv_by_std_in_grpo=norm_by_std)
        ours = gdpo_advantages(
            torch.tensor(components), weights, groups, torch.tensor(lengths), norm_by_std=norm_by_std
        )
        # verl's per-token advantage is constant over a response: read it at the first token
        assert ours.tolist() == pytest.approx(expected[:, 0].tolist(), abs=2e-5), trial
        assert math.isclose(float((ours * torch.tensor(lengths)).sum()), 0.0, abs_tol=1e-4)


def test_a_weight_per_component_is_required():
    with pytest.raises(ValueError, match="one weight per column"):
        gdpo_advantages(torch.ones(2, 2), [1.0], [0, 0], torch.tensor([1, 1]))
