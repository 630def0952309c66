"""The soft overlong penalty (DAPO's overlong reward shaping), added to a scored sample whatever the reward kind.

    penalty = overlong_penalty(response_len=19, max_response_len=20, buffer_len=4, penalty_factor=1.0)   # -0.75
    result = shape(result, response_len, max_response_len, profile.reward.overlong)   # score + penalty, once

The formula is verl's DAPO reward manager's (verl/workers/reward_manager/dapo.py, `overlong_buffer_cfg`): with
L = max_response_len and B = buffer_len, expected_len = L - B, exceed_len = response_len - expected_len and
penalty = min(-exceed_len / B * penalty_factor, 0). A response of at most L - B tokens loses nothing; one of L
tokens loses penalty_factor. The reward loop applies it after the last attempt succeeded, never to a failed sample,
so a failure stays a failure (rlrm/engine/rewards/loop.py).
"""

from __future__ import annotations

from rlrm.config.reward import OverlongConfig
from rlrm.engine.rewards.base import RewardResult


def overlong_penalty(response_len: int, max_response_len: int, buffer_len: int, penalty_factor: float) -> float:
    """The penalty (<= 0) of a response of `response_len` tokens (verl counts the EOS token too)."""
    expected_len = max_response_len - buffer_len
    exceed_len = response_len - expected_len
    # `+ 0.0` turns the -0.0 of a response exactly at expected_len into 0.0
    return min(-exceed_len / buffer_len * penalty_factor, 0.0) + 0.0


def shape(result: RewardResult, response_len: int, max_response_len: int, cfg: OverlongConfig) -> RewardResult:
    """`result` with the penalty added to its score; the penalty and whether it bit are kept in its extra info."""
    if cfg.buffer_len is None:  # the callers shape only with reward.overlong active
        raise ValueError("reward.overlong.buffer_len is not set: no overlong penalty to add")
    penalty = overlong_penalty(response_len, max_response_len, cfg.buffer_len, cfg.penalty_factor)
    result.score += penalty
    result.extra.update(overlong_penalty=penalty, overlong=penalty < 0)
    return result
