"""Token-level rewards of a scored batch: the outcome on the last generated token, per-turn rewards on each turn's.

    rewards = token_level_rewards(batch, results)     # [B, R]
    returns = rewards.sum(-1)                          # [B]: what GRPO normalises within each group

verl's reward managers write a sample's score at its last valid response token, and verl's GRPO
(`core_algos.compute_grpo_outcome_advantage`) first sums `token_level_rewards` over the response, then
normalises that sum within the group. rlrm does the same with per-turn rewards in the tensor: turn k's
reward (`turn_scores[k]`, rlrm/engine/rewards/turn_scores.py) sits on the last token turn k generated
(never on an observation token: those have response_mask 0), the outcome score on the last generated
token of the response. The sum, score + sum(turn_scores), is the sample's return.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlrm.engine.rewards.turn_scores import TURN_SCORES_KEY

if TYPE_CHECKING:
    import torch

    from rlrm.engine.actor.batch import RolloutBatch


def token_level_rewards(batch: RolloutBatch, results: list) -> torch.Tensor:
    """[B, R] float32: each result's score at its row's last generated token, its `turn_scores` at the turns' ends.

    A turn that generated no token (an engine that answered nothing) gives its reward to the last generated
    token. A row with no generated token at all holds everything in column 0 (only the sum is used).
    """
    import torch

    mask = batch.response_mask.cpu()  # [B, R]
    rows, width = mask.shape
    columns = torch.arange(width).expand(rows, width)
    last = torch.where(mask > 0, columns, torch.full_like(columns, -1)).max(-1).values.clamp(min=0)  # [B]
    turn_end = batch.turn_end.cpu() if batch.turn_end is not None else torch.zeros_like(columns)  # [B, R]
    given = [list(r.extra.get(TURN_SCORES_KEY, ())) for r in results]
    turns = max([int(turn_end.max())] + [len(g) for g in given])
    # column k + 1: turn k's reward; column 0 stays 0. One tensor from one list (a tensor per row: ~1 ms a 256-row step)
    table = torch.tensor([[0.0, *values] + [0.0] * (turns - len(values)) for values in given], dtype=torch.float32)
    table = table.view(rows, turns + 1)  # [B, turns + 1], also when B is 0
    out = table.gather(1, turn_end)  # [B, R]: each turn's reward at its last token, 0 elsewhere
    placed = torch.zeros_like(table).scatter_(1, turn_end, 1.0)
    unplaced = (table * (1.0 - placed)).sum(-1)  # turns that generated no token
    outcome = torch.tensor([float(r.score) for r in results], dtype=torch.float32)
    out[torch.arange(rows), last] += outcome + unplaced
    return out


def has_turn_scores(results: list) -> bool:
    """Whether any result carries per-turn rewards."""
    return any(TURN_SCORES_KEY in r.extra for r in results)
