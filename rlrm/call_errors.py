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
    status: int = 0  # the HTTP status that answered, when one did


class TransientError(CallError):
    """5xx, connection error or a server going away: worth another try."""

    retryable = True


class RequestTimeout(TransientError):
    kind = "timeout"


class BadRequest(CallError):
    """4xx: the request itself is wrong; retrying cannot help."""


class Throttled(TransientError):
    """429, or 503 with Retry-After: the server asks to be called later; waited for, never a failure by itself."""

    kind = "rate_limited"

    def __init__(self, message: str, retry_after_s: float | None = None):
        super().__init__(message)
        self.retry_after_s = retry_after_s  # what the server said (None: it did not say)


def retry_after_s(value: str | None) -> float | None:
    """Seconds in a Retry-After header (delta-seconds or an HTTP date); None when absent or unreadable.

    "nan" is unreadable (float() takes it, and max(0.0, nan) would make it 0: a retry at once, a 429 storm);
    "inf" is a huge wait, which the caller caps (reward.limits.max_retry_after_s)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return None if seconds != seconds else max(0.0, seconds)
    from email.utils import parsedate_to_datetime

    try:
        import time

        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None
