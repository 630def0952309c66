"""A step's samples as padded tensors: prompts left-padded, responses right-padded.

    batch = collate(completions, pad_token_id)
    batch.input_ids       # [B, P + R]: prompt i ends at column P - 1, its response starts at column P
    batch.response_mask   # [B, R], 1 on generated tokens (EOS included), 0 on tool observations and pads
    half = batch.select([0, 1])

Left-padding the prompts puts every response at the same columns, so one slice of the logits
scores every sample; position ids count real tokens only, so padding never shifts a position.

`prompt_key` and `prompt_start` stay on the CPU when the batch moves to a GPU: the log-prob forward reads which
rows share a prompt, and where the prompts start, from them, where reading the GPU's tensors would wait for the
work queued on it (a host sync per forward). `select` moves its row index to the batch's device once, without
waiting either.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass
class RolloutBatch:
    """The tensors of one step's samples; optional fields are filled in as the step goes on.

    Attributes:
        input_ids: [B, P + R] prompt (left-padded to P) then response (right-padded to R).
        attention_mask: [B, P + R] 1 on real tokens.
        position_ids: [B, P + R] cumsum(attention_mask) - 1, clamped at 0 (pads get 0).
        response_mask: [B, R] float, 1 on generated tokens (EOS included); 0 on pads and on the tokens a
            completion's `loss_mask` marks 0 (tool observations: attended to, never in the loss, KL, entropy
            or the token counts of `actor.loss_agg_mode`).
        rollout_log_prob: [B, R] the rollout engine's log-probs of the response tokens (0 on pads).
        policy_version: [B] the policy version that generated each sample.
        old_log_prob: [B, R] behaviour-policy log-probs (recomputed by the actor or the rollout's).
        ref_log_prob: [B, R] reference-model log-probs (KL loss).
        advantages: [B] (broadcast over tokens at loss time) or [B, R].
        scores: [B] one reward per sample.
        group_ids: [B] long, the prompt each sample answers (GRPO group).
        turn_end: [B, R] long, k + 1 at the last generated token of assistant turn k, 0 elsewhere (one turn for
            a single-turn sample); where per-turn rewards land (rlrm/engine/turn_rewards.py).
        token_level_rewards: [B, R] the outcome score and per-turn rewards at their tokens (set by the step).
        prompt_key: [B] long, on the CPU: the distinct prompt of each row, numbered in the sorted order of the
            prompts' (ids, mask) rows (what `rlrm.inference.kv_cache.distinct_rows` sorts by).
        prompt_start: [B] long, on the CPU: the column of each row's first prompt token (P - its length).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    response_mask: torch.Tensor
    rollout_log_prob: torch.Tensor
    policy_version: torch.Tensor
    old_log_prob: torch.Tensor | None = None
    ref_log_prob: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    scores: torch.Tensor | None = None
    group_ids: torch.Tensor | None = None
    turn_end: torch.Tensor | None = None
    token_level_rewards: torch.Tensor | None = None
    prompt_key: torch.Tensor | None = None
    prompt_start: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def prompt_length(self) -> int:
        """P, the padded prompt width."""
        return self.input_ids.shape[1] - self.response_length

    @property
    def response_length(self) -> int:
        """R, the padded response width."""
        return self.response_mask.shape[1]

    def select(self, index) -> RolloutBatch:
        """The rows in `index` (a list, range or long tensor), every tensor field alike."""
        index = torch.as_tensor(index, dtype=torch.long)
        on: dict[torch.device, torch.Tensor] = {index.device: index}

        def take(value):
            if not isinstance(value, torch.Tensor):
                return value
            if value.device not in on:  # copied once; to a GPU queued without waiting on it (to the CPU: waits)
                on[value.device] = index.to(value.device, non_blocking=value.device.type != "cpu")
            return value[on[value.device]]

        return RolloutBatch(**{f.name: take(getattr(self, f.name)) for f in fields(self)})

    def to(self, device) -> RolloutBatch:
        """A copy with every tensor on `device` (`prompt_key` and `prompt_start` stay on the CPU)."""
        return RolloutBatch(
            **{f.name: _move(getattr(self, f.name), "cpu" if f.name in CPU_FIELDS else device) for f in fields(self)}
        )


CPU_FIELDS = ("prompt_key", "prompt_start")


def filled(value: torch.Tensor | None, name: str) -> torch.Tensor:
    """`value`, a `RolloutBatch` field (named `name`) that the step has set by the time it is read."""
    if value is None:
        raise RuntimeError(f"RolloutBatch.{name} is read before the step set it")
    return value


def _move(value, device):
    return value.to(device) if isinstance(value, torch.Tensor) else value


def collate(completions: list, pad_token_id: int) -> RolloutBatch:
    """Pad completions into a RolloutBatch (P and R are the longest prompt and response).

    Args:
        completions: rollout `Completion`s (prompt_ids, token_ids, log_probs, policy_version, loss_mask).
        pad_token_id: the id written into padding (never attended to, never scored).

    Returns:
        A RolloutBatch with the input, mask, position and rollout log-prob tensors set; advantages,
        scores, group ids and old/ref log-probs are left for the caller.

    Raises:
        ValueError: no completions, an empty prompt (nothing would predict the first response
            token), or log-probs that do not match the response length.
    """
    if not completions:
        raise ValueError("collate needs at least one completion")
    for i, c in enumerate(completions):
        if not c.prompt_ids:
            raise ValueError(f"completion {i} has an empty prompt; every response needs a prompt token before it")
        if len(c.log_probs) != len(c.token_ids):
            raise ValueError(f"completion {i} has {len(c.log_probs)} log-probs for {len(c.token_ids)} response tokens")
        _check_loss_mask(i, c)
    rows = len(completions)
    width_p = max(len(c.prompt_ids) for c in completions)
    width_r = max(max(len(c.token_ids) for c in completions), 1)  # keep R >= 1 so shapes stay 2-D
    # One tensor made from one flat list per field: a tensor per row and a slice assignment per row cost ~8 ms a
    # tiny-rule step (256 rows), the flat lists ~1 ms.
    ids: list[int] = []
    log_probs: list[float] = []
    ends: tuple[list[int], list[int], list[int]] = ([], [], [])  # row, position, turn + 1
    for i, c in enumerate(completions):
        p, r = len(c.prompt_ids), len(c.token_ids)
        ids += [pad_token_id] * (width_p - p)
        ids += c.prompt_ids
        ids += c.token_ids
        ids += [pad_token_id] * (width_r - r)
        log_probs += c.log_probs
        log_probs += [0.0] * (width_r - r)
        placed = {position: k + 1 for k, position in enumerate(turn_ends(c)) if position is not None}
        for position, turn in placed.items():
            ends[0].append(i)
            ends[1].append(position)
            ends[2].append(turn)
    input_ids = torch.tensor(ids, dtype=torch.long).view(rows, width_p + width_r)
    rollout_lp = torch.tensor(log_probs, dtype=torch.float32).view(rows, width_r)
    prompt_len = torch.tensor([len(c.prompt_ids) for c in completions])  # [B]
    response_len = torch.tensor([len(c.token_ids) for c in completions])  # [B]
    columns = torch.arange(width_p + width_r)  # [P + R]
    attention = (columns >= width_p - prompt_len[:, None]) & (columns < width_p + response_len[:, None])
    attention = attention.long()  # [B, P + R]: 1 from the prompt's first token to the response's last
    response_mask = (columns[:width_r] < response_len[:, None]).float()  # [B, R]
    for i, c in enumerate(completions):
        if c.loss_mask is not None and c.token_ids:  # tool observations: attended to, never trained on
            response_mask[i, : len(c.token_ids)] = torch.tensor(c.loss_mask, dtype=torch.float32)
    turn_end = torch.zeros((rows, width_r), dtype=torch.long)
    if ends[0]:
        turn_end[ends[0], ends[1]] = torch.tensor(ends[2], dtype=torch.long)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    prompts = torch.cat([input_ids[:, :width_p], attention[:, :width_p]], dim=1)  # pads apart from a real token
    _, prompt_key = torch.unique(prompts, dim=0, return_inverse=True)
    return RolloutBatch(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        response_mask=response_mask,
        rollout_log_prob=rollout_lp,
        policy_version=torch.tensor([c.policy_version for c in completions], dtype=torch.long),
        turn_end=turn_end,
        prompt_key=prompt_key,
        prompt_start=width_p - prompt_len,
    )


def turn_ends(completion) -> list[int | None]:
    """The response position of each assistant turn's last generated token (None: the turn generated none).

    An agent trajectory's turns (meta["agent"]["turns"], each with its token count) alternate generated
    segments and observations; a single-turn response is one turn ending at its last token.
    """
    turns = (completion.meta or {}).get("agent", {}).get("turns")
    if not turns:
        return [len(completion.token_ids) - 1] if completion.token_ids else [None]
    ends, at = [], 0
    for turn in turns:
        at += int(turn.get("tokens", 0))
        if turn["role"] == "assistant":
            ends.append(at - 1 if turn.get("tokens") else None)
    return ends


def _check_loss_mask(i: int, completion) -> None:
    mask = completion.loss_mask  # None: every response token was generated
    if mask is None:
        return
    if len(mask) != len(completion.token_ids):
        raise ValueError(
            f"completion {i} has a loss mask of {len(mask)} for {len(completion.token_ids)} response tokens"
        )
    if any(m not in (0, 1) for m in mask):
        raise ValueError(f"completion {i} has a loss mask with values other than 0 and 1")
