"""The per-sample reward contract shared by every reward kind.

A reward function is `async (RewardSample) -> RewardResult`. Rule functions, DisRM and GenRM
clients and user functions all meet here, so scheduling code never needs to know which kind
it is calling.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol


@dataclass(frozen=True)
class RewardSample:
    """What a reward function sees of one finished rollout."""

    uid: str  # prompt id; the n samples of one prompt share it (the GRPO group)
    index: int  # position in the step's batch
    data_source: str
    prompt: list[dict[str, Any]]  # chat messages
    solution_str: str  # decoded response, special tokens removed
    ground_truth: str
    extra_info: dict[str, Any] = field(default_factory=dict)
    response_length: int | None = None  # response tokens, EOS included (reward.overlong); None: not known


@dataclass
class RewardResult:
    """A score and whatever else the function reports (kept as `reward_extra_info`)."""

    score: float
    extra: dict[str, Any] = field(default_factory=dict)


RewardFn = Callable[[RewardSample], Awaitable[RewardResult]]


class ClosableRewardFn(Protocol):
    """A `RewardFn` with `close()`, which stops what the function started (a custom function's worker processes)
    and does nothing for the others: what `build_reward_fn` (rlrm/engine/rewards/factory.py) returns."""

    close: Callable[[], None]

    def __call__(self, sample: RewardSample, /) -> Awaitable[RewardResult]: ...


def is_bool(value: Any) -> bool:
    """Python's, numpy's (dtype "bool") or torch's bool."""
    return isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool")


def is_score(value: Any) -> bool:
    """A bare score: a real number (numpy's scalars too) or a 0-d array or tensor; not a bool (a likely slip for a
    score), nor text. float() then reads it, or names it non-numeric."""
    if isinstance(value, (str, bytes)) or is_bool(value):
        return False
    return isinstance(value, numbers.Real) or getattr(value, "ndim", None) == 0
