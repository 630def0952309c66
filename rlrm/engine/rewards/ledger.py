"""What one sample's reward cost in reward-model calls: counted where the calls are made, reported with the result.

    with ledger_scope() as ledger:        # the reward loop's per-sample wrapper (rlrm/engine/rewards/factory.py)
        result = await fn(sample)         # every call through rlrm/engine/rewards/metered.py lands in `ledger`
    result.extra.update(ledger.as_extra())

The ledger travels in the result's extra (and in a failed call's `extra`), so counts made in a Ray worker
reach the reward loop's counters exactly as local ones do: `reward/model_calls`, judge tokens,
`reward/rate_limited`, `reward/throttle_wait_s`, `reward/model_not_found`. `model_requests` keeps each call
(path, status, when, how long, the start of its answer): trace spans of the sample, and what
`samples.jsonl` shows of a custom function's requests.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

_ANSWER_CHARS = 200
COUNTED = ("model_calls", "rate_limited", "throttle_wait_s", "model_not_found")


@dataclass
class CallLedger:
    started: float = field(default_factory=time.perf_counter)
    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    rate_limited: int = 0  # 429 / 503-with-Retry-After answers, waited for and sent again
    throttle_wait_s: float = 0.0  # waiting for the rate limit or a Retry-After
    model_not_found: int = 0  # 404 answers: a path or model the reward servers do not serve
    transient_errors: int = 0  # calls that got no answer (timeout, connection error, 5xx)
    requests: list[dict] = field(default_factory=list)

    def record(self, method: str, path: str, status: int, start: float, answer: str = "") -> None:
        """One call answered `status` (0: no answer); `start` is its time.perf_counter()."""
        self.model_calls += 1
        self.model_not_found += status == 404
        self.transient_errors += status == 0 or status >= 500
        self.requests.append(
            {
                "call": f"{method} {path}",
                "status": status,
                "offset_s": round(start - self.started, 4),
                "duration_s": round(time.perf_counter() - start, 4),
                "answer": answer[:_ANSWER_CHARS],
            }
        )

    def add_usage(self, usage: dict | None) -> int | None:
        """Count an answer's token usage (OpenAI `usage` or SGLang `meta_info`); the total, or None without one."""
        if not usage:
            return None
        prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        return prompt + completion

    def as_extra(self) -> dict:
        """The counts as reward extra info (empty when no call was made)."""
        if not (self.model_calls or self.rate_limited):
            return {}
        return {
            "model_calls": self.model_calls,
            "judge_prompt_tokens": self.prompt_tokens,
            "judge_completion_tokens": self.completion_tokens,
            "rate_limited": self.rate_limited,
            "throttle_wait_s": round(self.throttle_wait_s, 4),
            "model_not_found": self.model_not_found,
            "model_requests": self.requests,
        }

    def merge(self, extra: dict) -> None:
        """Add counts made elsewhere (another ledger's `as_extra()`, e.g. from a Ray worker) to this ledger's."""
        self.model_calls += int(extra.get("model_calls", 0))
        self.prompt_tokens += int(extra.get("judge_prompt_tokens", 0))
        self.completion_tokens += int(extra.get("judge_completion_tokens", 0))
        self.rate_limited += int(extra.get("rate_limited", 0))
        self.throttle_wait_s += float(extra.get("throttle_wait_s", 0.0))
        self.model_not_found += int(extra.get("model_not_found", 0))
        self.requests.extend(extra.get("model_requests", ()))


# the keys `as_extra` adds to a reward's extra info (a custom function's dict among them): counts, not its own numbers
LEDGER_KEYS = (
    "model_calls",
    "judge_prompt_tokens",
    "judge_completion_tokens",
    "rate_limited",
    "throttle_wait_s",
    "model_not_found",
    "model_requests",
)

_current: ContextVar[CallLedger | None] = ContextVar("rlrm_call_ledger", default=None)


def current_ledger() -> CallLedger:
    """The ledger of the sample being scored (a throwaway one outside any scope)."""
    return _current.get() or CallLedger()


@contextmanager
def ledger_scope(reuse: bool = False):
    """A fresh ledger for the calls made inside (one sample's reward); with `reuse`, the current one if a scope
    is open already (the reward loop opens one per attempt, so that an attempt cut off by its timeout still
    counts the calls it made)."""
    if reuse and _current.get() is not None:
        yield _current.get()
        return
    ledger = CallLedger()
    token = _current.set(ledger)
    try:
        yield ledger
    finally:
        _current.reset(token)
