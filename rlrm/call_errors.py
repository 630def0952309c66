"""How one call to a server or a function can fail, so the caller knows what to retry and what to count.

At the bottom of the package (beside `rlrm.errors`, importing nothing of rlrm): the HTTP clients in
`rlrm.launch.client` raise these for rollout and reward requests alike; the reward loop retries the
retryable ones and counts each under its `kind`. Reward-specific failures (an unparsed verdict, a
non-finite score) subclass `CallError` in `rlrm.engine.rewards.errors`.
"""

from __future__ import annotations


class CallError(Exception):
    """One call (a reward for one sample, one generation request) failed."""

    retryable = False
    kind = "failure"  # the counter it lands in (besides reward/failures)
    extra: dict = {}  # what the failed call still reports (e.g. judge token usage)


class TransientError(CallError):
    """5xx, connection error or a server going away: worth another try."""

    retryable = True


class RequestTimeout(TransientError):
    kind = "timeout"


class BadRequest(CallError):
    """4xx: the request itself is wrong; retrying cannot help."""
