"""A step's samples as padded tensors: prompts left-padded, responses right-padded.

    batch = collate(completions, pad_token_id)
    batch.input_ids       # [B, P + R]
    batch.response_mask   # [B, R], 1 on generated tokens (EOS included)
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass
class RolloutBatch:
    input_ids: torch.Tensor  # [B, P + R]
    attention_mask: torch.Tensor  # [B, P + R]
    position_ids: torch.Tensor  # [B, P + R]
    response_mask: torch.Tensor  # [B, R]
    rollout_log_prob: torch.Tensor  # [B, R] from the rollout engine
    policy_version: torch.Tensor  # [B]
    old_log_prob: torch.Tensor | None = None  # [B, R]
    ref_log_prob: torch.Tensor | None = None  # [B, R]
    advantages: torch.Tensor | None = None  # [B]
    scores: torch.Tensor | None = None  # [B]
    group_ids: torch.Tensor | None = None  # [B]

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def response_length(self) -> int:
        return self.response_mask.shape[1]

    def select(self, index) -> "RolloutBatch":
        """The rows in `index` (a list or index tensor), every tensor field alike."""
        index = torch.as_tensor(index, dtype=torch.long)
        return RolloutBatch(**{f.name: _take(getattr(self, f.name), index) for f in fields(self)})

    def to(self, device) -> "RolloutBatch":
        return RolloutBatch(**{f.name: _move(getattr(self, f.name), device) for f in fields(self)})


def _take(value, index):
    return value[index.to(value.device)] if isinstance(value, torch.Tensor) else value


def _move(value, device):
    return value.to(device) if isinstance(value, torch.Tensor) else value


def collate(completions: list, pad_token_id: int) -> RolloutBatch:
    """Pad completions into a RolloutBatch (prompt width P and response width R are the maxima)."""
    rows = len(completions)
    width_p = max(len(c.prompt_ids) for c in completions)
    width_r = max(max(len(c.token_ids) for c in completions), 1)
    input_ids = torch.full((rows, width_p + width_r), pad_token_id, dtype=torch.long)
    attention = torch.zeros((rows, width_p + width_r), dtype=torch.long)
    response_mask = torch.zeros((rows, width_r), dtype=torch.float32)
    rollout_lp = torch.zeros((rows, width_r), dtype=torch.float32)
    for i, c in enumerate(completions):
        p, r = len(c.prompt_ids), len(c.token_ids)
        input_ids[i, width_p - p : width_p] = torch.tensor(c.prompt_ids)
        attention[i, width_p - p : width_p] = 1
        if r:
            input_ids[i, width_p : width_p + r] = torch.tensor(c.token_ids)
            attention[i, width_p : width_p + r] = 1
            response_mask[i, :r] = 1.0
            rollout_lp[i, :r] = torch.tensor(c.log_probs, dtype=torch.float32)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    return RolloutBatch(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        response_mask=response_mask,
        rollout_log_prob=rollout_lp,
        policy_version=torch.tensor([c.policy_version for c in completions], dtype=torch.long),
    )
