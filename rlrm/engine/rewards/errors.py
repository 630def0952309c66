"""Reward-specific failures of one sample's reward, beside the transport errors of `rlrm.call_errors`."""

from __future__ import annotations

from rlrm.call_errors import CallError


class UnparsedVerdict(CallError):
    """The judge answered without a verdict the parser recognises."""

    kind = "unparsed"


class NonFiniteScore(CallError):
    """The reward model returned NaN or inf."""

    kind = "nonfinite"


class InjectedFailure(CallError):
    """A failure made on purpose by `reward.inject.fail_rate`: retried like a transient error."""

    retryable = True
    kind = "injected"


class BadComponents(CallError):
    """The reward's components are missing, extra or not numbers (rlrm/engine/rewards/components.py)."""

    kind = "components"


class BadTurnScores(CallError):
    """The reward's per-turn rewards are not a list of one number per turn (rlrm/engine/rewards/turn_scores.py)."""

    kind = "turn_scores"
