"""GDPO advantages: each reward component normalised within its group, then a weighted sum, then whitened.

    advantages = gdpo_advantages(components, weights, group_ids, token_counts)   # [B, K], [K], [B], [B] -> [B]

The maths is verl's, read from verl-project/verl (commit 1dda039b, 2026-08-22):
`verl/trainer/ppo/core_algos.py::compute_gdpo_outcome_advantage` (the `gdpo` advantage estimator; the
`gdpo` reward manager, `verl/experimental/reward_loop/reward_manager/gdpo.py::GDPORewardManager.run_single`,
only forwards every key of the function's result dict, so the maths all lives in the estimator):

1. For each component k, GRPO's normalisation within the group of the same prompt
   (`compute_grpo_outcome_advantage`): A_k = (r_k - mean_g(r_k)) / (std_g(r_k) + eps), std the unbiased
   one (torch.std), eps = 1e-6 (`algorithm.adv_eps` here); a group of one has mean 0 and std 1; a
   component equal across its group (std 0) gives A_k = 0 / eps = 0; with `norm_adv_by_std_in_grpo`
   False only the mean is taken away.
2. A_sum = sum_k w_k * A_k, weights `algorithm.gdpo_reward_weights` (default all 1).
3. A batch whitening over the response tokens (`verl/utils/torch_functional.py::masked_whiten`): every
   token of a response carries its sample's A_sum; mean and variance are taken over all valid tokens of
   the batch (so a sample weighs by its response length), the variance with Bessel's correction over the
   token count, and A = (A_sum - mean) * rsqrt(var + 1e-8).

The scalar `score` of each sample plays no part (verl reads only the component keys); it is still the
logged `critic/score`.
"""

from __future__ import annotations

import torch

from rlrm.engine.algorithms import grpo_advantages

WHITEN_EPS = 1e-8  # verl's masked_whiten: rsqrt(var + 1e-8)


def whiten_by_tokens(values: torch.Tensor, token_counts: torch.Tensor) -> torch.Tensor:
    """verl's masked_whiten of per-sample values broadcast over their response tokens.

    Args:
        values: [B] one value per sample (the same on each of its tokens).
        token_counts: [B] valid response tokens per sample.

    Returns:
        [B] (values - token mean) * rsqrt(unbiased token variance + 1e-8). With fewer than two tokens in
        all (where verl raises) the variance is taken as 0.
    """
    counts = token_counts.to(torch.float64)  # [B]
    x = values.to(torch.float64)
    total = counts.sum()
    mean = (x * counts).sum() / (total + 1e-8)  # masked_mean adds 1e-8 to the mask sum too
    var = ((x - mean) ** 2 * counts).sum() / (total + 1e-8)
    var = var * total / (total - 1) if total > 1 else torch.zeros_like(var)
    return ((x - mean) * torch.rsqrt(var + WHITEN_EPS)).to(torch.float32)


def gdpo_advantages(
    components: torch.Tensor,
    weights: torch.Tensor,
    group_ids,
    token_counts: torch.Tensor,
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> torch.Tensor:
    """GDPO advantages of a batch (see the module docstring for the steps and verl's source).

    Args:
        components: [B, K] the K named reward components of each sample.
        weights: [K] each component's weight in the sum.
        group_ids: [B] the prompt each sample answers (the GRPO group).
        token_counts: [B] valid response tokens per sample (the whitening weighs tokens, as verl's).
        eps: added to each component's group std.
        norm_by_std: False: each component only has its group mean taken away (Dr.GRPO).

    Returns:
        [B] advantages (verl's per-token advantage of each sample).
    """
    components = torch.as_tensor(components, dtype=torch.float32)  # [B, K]
    weights = torch.as_tensor(weights, dtype=torch.float32)  # [K]
    if components.dim() != 2 or components.shape[1] != weights.numel():
        raise ValueError(f"components {tuple(components.shape)} need one weight per column, got {weights.numel()}")
    summed = torch.zeros(components.shape[0])  # [B]
    for k in range(components.shape[1]):
        summed += weights[k] * grpo_advantages(components[:, k], group_ids, eps=eps, norm_by_std=norm_by_std)
    return whiten_by_tokens(summed, torch.as_tensor(token_counts))
