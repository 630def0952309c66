"""GRPO maths as pure functions of tensors: advantages, PPO-clip loss, aggregation, KL, entropy.

Semantics follow verl's `core_algos.py` so numbers can be compared across the two tools.
Shapes: B samples, T response tokens; `mask` is 1 on response tokens that count.
"""

from __future__ import annotations

import torch

AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_KINDS = ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl")


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `x` where `mask` is 1 (over all elements, or along `dim`)."""
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def grpo_advantages(scores, group_ids, eps: float = 1e-6, norm_by_std: bool = True) -> torch.Tensor:
    """Group-normalised advantages: (score - group mean) / (group std + eps).

    Args:
        scores: [B] one scalar reward per sample.
        group_ids: [B] the prompt each sample answers (ints or any hashables).
        eps: added to the std so equal scores give 0, not NaN.
        norm_by_std: False gives Dr.GRPO (score - group mean).

    Returns:
        [B] float32 advantages, computed in float64 (scores near float32's range, 1e30 say, would overflow their
        squares). The std is the unbiased one; a group of one has mean 0 and std 1.
    """
    scores = (
        torch.as_tensor(scores).to(torch.float64)
        if torch.is_tensor(scores)
        else torch.tensor(scores, dtype=torch.float64)
    )
    if not torch.is_tensor(group_ids):
        index: dict = {}
        group_ids = torch.tensor([index.setdefault(g, len(index)) for g in group_ids], dtype=torch.long)
    _, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    num_groups = counts.numel()
    sums = torch.zeros(num_groups, dtype=scores.dtype).index_add_(0, inverse, scores)
    means = sums / counts  # [G]
    sq = torch.zeros(num_groups, dtype=scores.dtype).index_add_(0, inverse, (scores - means[inverse]) ** 2)
    stds = torch.sqrt(sq / (counts - 1).clamp(min=1))  # unbiased
    single = counts == 1
    means = torch.where(single, torch.zeros_like(means), means)
    stds = torch.where(single, torch.ones_like(stds), stds)
    centred = scores - means[inverse]
    if not norm_by_std:
        return centred.float()
    return (centred / (stds[inverse] + eps)).float()


def aggregate_loss(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Reduce a [B, T] token loss to a scalar.

    Modes: `token-mean` (mean over all valid tokens), `seq-mean-token-sum` (sum per sequence,
    mean over sequences), `seq-mean-token-mean` (mean per sequence, mean over sequences),
    `seq-mean-token-sum-norm` (sum of sequence sums divided by T, Dr.GRPO). Sequences with no
    valid token are left out of the sequence means.
    """
    mask = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        return masked_mean(loss_mat, mask)
    seq_valid = mask.sum(-1) > 0  # [B]
    num_seqs = seq_valid.sum().clamp(min=1)
    seq_sums = (loss_mat * mask).sum(-1)  # [B]
    if mode == "seq-mean-token-sum":
        return seq_sums[seq_valid].sum() / num_seqs
    if mode == "seq-mean-token-mean":
        seq_means = seq_sums / mask.sum(-1).clamp(min=1.0)
        return seq_means[seq_valid].sum() / num_seqs
    if mode == "seq-mean-token-sum-norm":
        return seq_sums.sum() / loss_mat.shape[-1]
    raise ValueError(f"unknown loss aggregation mode {mode!r}; use one of {', '.join(AGG_MODES)}")


def policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_c: float = 3.0,
    agg: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate with asymmetric clip range and dual clip (verl's "vanilla" loss).

    Args:
        log_prob: [B, T] log-probs under the current policy (with grad).
        old_log_prob: [B, T] log-probs under the behaviour policy.
        advantages: [B, T] or [B] (broadcast over tokens).
        mask: [B, T] response mask.
        clip_low / clip_high: the ratio is clipped to [1 - clip_low, 1 + clip_high].
        clip_c: for negative advantages the loss is bounded by -A * clip_c (dual clip).
        agg: aggregation mode, see `aggregate_loss`.

    Returns:
        (loss, metrics) with metrics `pg_clipfrac`, `pg_clipfrac_lower`, `ppo_kl` as detached 0-d tensors (read
        once per mini-batch by the caller, not once each: a read waits for the GPU).
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1).expand_as(log_prob)  # [B, T]
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)  # [B, T]
    ratio = torch.exp(log_ratio)
    ppo_kl = masked_mean(-log_ratio, mask)

    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss_ppo = torch.maximum(loss_unclipped, loss_clipped)
    clipfrac = masked_mean(torch.gt(loss_clipped, loss_unclipped).float(), mask)

    loss_dual = -advantages * clip_c  # an upper bound on the loss when A < 0
    loss_lower_clipped = torch.minimum(loss_dual, loss_ppo)
    clipfrac_lower = masked_mean(torch.gt(loss_ppo, loss_dual).float() * (advantages < 0).float(), mask)
    loss_mat = torch.where(advantages < 0, loss_lower_clipped, loss_ppo)

    loss = aggregate_loss(loss_mat, mask, agg)
    metrics = {
        "pg_clipfrac": clipfrac.detach(),
        "pg_clipfrac_lower": clipfrac_lower.detach(),
        "ppo_kl": ppo_kl.detach(),
    }
    return loss, metrics


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kind: str) -> torch.Tensor:
    """Token-level KL estimate between the policy and the reference, [B, T].

    Kinds: `k1`/`kl` (log ratio), `abs`, `k2`/`mse` (half squared log ratio), `k3`/`low_var_kl`
    (ratio - log ratio - 1 on ref/policy, clamped to [-10, 10]). A `+` suffix keeps the value of
    the kind but takes the gradient of k2 (an unbiased gradient of the KL).
    """
    if kind.endswith("+"):
        forward = kl_penalty(log_prob, ref_log_prob, kind[:-1])
        backward = kl_penalty(log_prob, ref_log_prob, "k2")
        return backward - backward.detach() + forward.detach()
    diff = log_prob - ref_log_prob
    if kind in ("k1", "kl"):
        return diff
    if kind == "abs":
        return diff.abs()
    if kind in ("k2", "mse"):
        return 0.5 * diff.square()
    if kind in ("k3", "low_var_kl"):
        kl = torch.clamp(ref_log_prob - log_prob, min=-20.0, max=20.0)
        return torch.clamp(torch.exp(kl) - kl - 1.0, min=-10.0, max=10.0)
    raise ValueError(f"unknown KL kind {kind!r}; use one of {', '.join(KL_KINDS)} (optionally with '+')")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical distribution over the last dimension: [..., V] -> [...]."""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)
