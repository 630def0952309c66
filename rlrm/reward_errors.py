"""How a reward call can fail, so the reward loop knows what to retry and what to count.

At the bottom of the package (beside `rlrm.errors`, importing nothing of rlrm): the reward functions
in the engine raise these, and so do the HTTP clients in `rlrm.launch` that they call.
"""

from __future__ import annotations


class RewardCallError(Exception):
    """A reward could not be computed for one sample."""

    retryable = False
    kind = "failure"  # the counter it lands in (besides reward/failures)
    extra: dict = {}  # what the failed call still reports (e.g. judge token usage)


class TransientError(RewardCallError):
    """5xx, connection error or a server going away: worth another try."""

    retryable = True


class RequestTimeout(TransientError):
    kind = "timeout"


class BadRequest(RewardCallError):
    """4xx: the request itself is wrong; retrying cannot help."""


class UnparsedVerdict(RewardCallError):
    """The judge answered without a verdict the parser recognises."""

    kind = "unparsed"


class NonFiniteScore(RewardCallError):
    """The reward model returned NaN or inf."""

    kind = "nonfinite"


class InjectedFailure(RewardCallError):
    """A failure made on purpose by `reward.inject.fail_rate`: retried like a transient error."""

    retryable = True
    kind = "injected"
