"""How a mini-batch is split across training ranks: whole groups, balanced by tokens, equal row counts.

    shards = split_for_ranks(mini_batch, world_size=2)
    shards[r].batch        # rank r's rows (padded with masked-out copies to the same count on every rank)
    shards[r].rows         # their row numbers in `mini_batch` (the real ones, in order)
    log_probs = gather_rows([out_0, out_1], shards, len(mini_batch))

Every rank must run the same number of forward and backward passes (each one is a round of FSDP
all-gathers and reduce-scatters), so every shard gets the same number of rows; a shorter one is
padded with copies of a real row whose response mask is zero. A masked-out row adds nothing to any
loss (no valid token, no valid sequence) and its log-probs are dropped when gathered.

Groups (the n samples of a prompt) stay on one rank when there are at least as many groups as
ranks, so a rank runs each prompt once (rlrm/engine/actor/logprobs.py); they are dealt largest
first to the rank with the fewest valid tokens, at most ceil(groups / ranks) groups each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlrm.engine.actor.batch import RolloutBatch


@dataclass
class RankShard:
    """One rank's rows of a mini-batch.

    Attributes:
        batch: the rows, then `padding` masked-out copies.
        rows: row numbers in the mini-batch of the real rows of `batch`, in its order.
    """

    batch: RolloutBatch
    rows: list[int]

    @property
    def padding(self) -> int:
        return len(self.batch) - len(self.rows)


def split_for_ranks(batch: RolloutBatch, world_size: int) -> list[RankShard]:
    """Split `batch` into `world_size` shards of equal row count (see the module docstring)."""
    groups = _groups(batch)
    if len(groups) < world_size:
        groups = [[i] for i in range(len(batch))]  # too few groups: split them (advantages are already set)
    tokens = batch.response_mask.sum(-1).tolist()  # [B] valid tokens per row
    cap = math.ceil(len(groups) / world_size)
    assigned: list[list[int]] = [[] for _ in range(world_size)]
    load, count = [0.0] * world_size, [0] * world_size
    for group in sorted(groups, key=lambda g: -sum(tokens[i] for i in g)):
        open_ranks = [r for r in range(world_size) if count[r] < cap]
        rank = min(open_ranks, key=lambda r: (load[r], len(assigned[r]), r))
        assigned[rank] += group
        load[rank] += sum(tokens[i] for i in group)
        count[rank] += 1
    width = max(max(len(a) for a in assigned), 1)
    shards = []
    for rows in assigned:
        rows = sorted(rows)
        pad = width - len(rows)
        filler = rows[:1] or [0]
        shard = batch.select(rows + filler * pad)
        if pad:
            shard.response_mask = shard.response_mask.clone()
            shard.response_mask[len(rows) :] = 0.0  # [pad, R] masked out: no token, no sequence
        shards.append(RankShard(shard, rows))
    return shards


def gather_rows(outputs: list[torch.Tensor], shards: list[RankShard], total: int) -> torch.Tensor:
    """Put each rank's per-row outputs ([rows + padding, ...]) back in mini-batch order: [total, ...]."""
    first = outputs[0]
    out = torch.empty((total, *first.shape[1:]), dtype=first.dtype)
    for value, shard in zip(outputs, shards):
        out[shard.rows] = value[: len(shard.rows)].to(out.device)
    return out


def _groups(batch: RolloutBatch) -> list[list[int]]:
    """Row numbers of each group, in order of first appearance (each row its own group without ids)."""
    if batch.group_ids is None:
        return [[i] for i in range(len(batch))]
    members: dict[int, list[int]] = {}
    for i, g in enumerate(batch.group_ids.tolist()):
        members.setdefault(g, []).append(i)
    return list(members.values())
