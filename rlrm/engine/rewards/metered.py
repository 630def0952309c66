"""Reward-model calls under the run's rate limits, with Retry-After honoured and every call counted.

    metered = MeteredBalancer(balancer, profile.reward, limiter)    # limiter: RateLimiter, its Ray actor, or None
    body = await metered.post("/v1/chat/completions", body, timeout_s)
    status, data, ctype = await metered.forward("POST", "/generate", raw_body, timeout_s, ledger)   # a custom function's call

Every reward kind that calls a model goes through here (GenRM, DisRM, and a custom function's own calls
through rlrm/engine/rewards/model_proxy.py). Before each request the limiter is asked for a slot (its token
estimate: the request's `max_tokens` plus its text at 4 characters a token); after it, the slot is freed and
the estimate corrected by the `usage` the server returned. Estimates are scaled down to what recent answers of
this judge actually used (the largest used/estimated ratio of the last RATIO_WINDOW answers, plus 5%, never
above the estimate): a judge that writes 20 tokens of a 64-token budget would otherwise hold its token budget
at 3x what it spends, and a run with `reward.limits.tpm` would use a third of its limit. A 429, or a 503 with `Retry-After`, is a request
to come back later, not a failure: the caller waits what the server said (capped at
`reward.limits.max_retry_after_s`; without a Retry-After, the loop's backoff), every other caller of the
limiter waits too, and the request goes again, for as long as the sample's deadline allows. Each call lands
in the sample's ledger (rlrm/engine/rewards/ledger.py).
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from collections import deque

from rlrm.call_errors import CallError, RequestTimeout, Throttled
from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.ledger import CallLedger, current_ledger

_CHARS_PER_TOKEN = 4
RATIO_WINDOW = 32  # answers whose used/estimated ratio scales the next estimates
_RATIO_MARGIN = 1.05


def estimate_tokens(body: dict | bytes) -> int:
    """Tokens a request may cost: its answer budget plus its prompt, estimated from the text's length. Any body gets
    an estimate (a batch sums its prompts; a count that is no number counts 0): a body the server refuses is its to
    answer, with its own 400, not a bare 500 from here."""
    if isinstance(body, (bytes, bytearray)):
        try:
            body = json.loads(body or b"{}")
        except ValueError:
            return 1
    if not isinstance(body, dict):
        return 1
    params = body.get("sampling_params")
    if isinstance(params, list):  # SGLang's batch /generate: one set per prompt
        answer = sum(_count(p.get("max_new_tokens")) for p in params if isinstance(p, dict))
    else:
        new_tokens = params.get("max_new_tokens") if isinstance(params, dict) else None
        each = _count(body.get("max_tokens")) or _count(body.get("max_completion_tokens")) or _count(new_tokens)
        answer = each * _prompts(body)
    ids = body.get("input_ids")
    if isinstance(ids, list):  # one prompt's ids, or a batch's lists of them
        prompt_tokens = sum(len(i) if isinstance(i, list) else 1 for i in ids)
    else:
        prompt = body.get("messages") or body.get("prompt") or body.get("text") or body.get("input") or ""
        prompt_tokens = len(json.dumps(prompt)) // _CHARS_PER_TOKEN
    return max(1, answer + prompt_tokens)


def _count(value) -> int:
    """A token count as a body gives it; 0 when it is not a finite number of at least 0 (the server refuses it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return 0
    return int(value)


def _prompts(body: dict) -> int:
    """How many prompts one request carries: SGLang's /generate and /v1/completions take a list of them."""
    for key in ("input_ids", "text", "prompt"):
        value = body.get(key)
        if isinstance(value, list) and value and all(isinstance(v, (str, list)) for v in value):
            return len(value)
    return 1


class MeteredBalancer:
    """A ReplicaBalancer's `post` and `forward`, limited, retried on 429 as the server asks, and counted."""

    def __init__(self, balancer, cfg: RewardConfig, limiter=None):
        self.balancer, self.cfg, self.limiter = balancer, cfg, limiter
        self.urls = balancer.urls
        self._capped_said = False
        self._ratios: deque[float] = deque(maxlen=RATIO_WINDOW)  # used / estimated of recent answers

    def charge(self, estimated: int) -> int:
        """The tokens to hold for a request estimated at `estimated`: scaled by recent answers' usage."""
        if not self._ratios:
            return estimated
        scale = min(1.0, max(self._ratios) * _RATIO_MARGIN)
        return max(1, math.ceil(estimated * scale))

    async def post(self, path: str, body: dict, timeout_s: float, url: str | None = None) -> dict:
        """As ReplicaBalancer.post (raises its errors), within the limits; the call counted in the sample's ledger."""
        ledger = current_ledger()

        async def send():
            start = time.perf_counter()
            try:
                out = await self.balancer.post(path, body, timeout_s, url=url)
            except Throttled:
                raise
            except CallError as exc:
                ledger.record("POST", path, exc.status, start, str(exc))
                if isinstance(exc, RequestTimeout):
                    raise _named(exc) from None
                raise
            ledger.record("POST", path, 200, start, json.dumps(out))
            return out, ledger.add_usage(_usage(out))

        return await self._limited(path, estimate_tokens(body), send, ledger)

    async def forward(
        self, method: str, path: str, data: bytes, timeout_s: float, ledger: CallLedger
    ) -> tuple[int, bytes, str]:
        """One call of a custom function, as it came: the answer comes back as it is, except a 429, waited out."""

        async def send():
            start = time.perf_counter()
            try:
                status, body, ctype, _ = await self.balancer.forward(method, path, data, timeout_s)
            except Throttled:
                raise
            except CallError as exc:
                ledger.record(method, path, 0, start, str(exc))
                if isinstance(exc, RequestTimeout):
                    raise _named(exc, streamed=_asks_stream(data)) from None
                raise
            ledger.record(method, path, status, start, body[:200].decode("utf-8", "replace"))
            used = ledger.add_usage(_usage(_answer(body))) if status == 200 else None
            return (status, body, ctype), used

        return await self._limited(path, estimate_tokens(data), send, ledger)

    async def _limited(self, path: str, estimated: int, send, ledger: CallLedger):
        """`send()` under the limiter, again after every 429/503-with-Retry-After, until it has an answer."""
        attempt = 0
        while True:
            charged = self.charge(estimated)
            if self.limiter is not None:
                ledger.throttle_wait_s += await self.limiter.acquire(charged)
            used = charged
            try:
                answer, used_tokens = await send()
                if used_tokens is not None:
                    used = used_tokens
                    self._ratios.append(used_tokens / estimated)
                return answer
            except Throttled as exc:
                wait_s = self._wait(exc.retry_after_s, attempt, path)
            finally:
                if self.limiter is not None:
                    await self.limiter.release(charged, used)
            ledger.rate_limited += 1
            ledger.throttle_wait_s += wait_s
            if self.limiter is not None:
                await self.limiter.pause(wait_s)  # every worker of the run holds off, not only this one
            await asyncio.sleep(wait_s)
            attempt += 1

    def _wait(self, said_s: float | None, attempt: int, path: str) -> float:
        """What a 429 asked for, capped; the loop's backoff when it asked nothing (or 0: a refusal that says to come
        back at once would have every worker send again at once, and be refused again)."""
        limits, cfg = self.cfg.limits, self.cfg
        if not said_s:
            return min(cfg.backoff_max_s, max(cfg.backoff_s, 0.05) * 2**attempt)
        if said_s > limits.max_retry_after_s and not self._capped_said:
            self._capped_said = True
            print(
                f"rlrm: {path} asked to retry after {said_s:g} s; waiting reward.limits.max_retry_after_s="
                f"{limits.max_retry_after_s:g} s instead",
                file=sys.stderr,
                flush=True,
            )
        return min(said_s, limits.max_retry_after_s)


def _json(body: bytes):
    try:
        return json.loads(body)
    except ValueError:
        return None


def _answer(body: bytes):
    """A forwarded answer's JSON: the body, or a server-sent event stream's last chunk that carries `usage`
    (`stream_options: {"include_usage": true}`; a stream without it says no token counts)."""
    out = _json(body)
    if out is not None:
        return out
    for line in reversed(body.splitlines()):  # a stream may open with a comment (": PROCESSING") or an event line
        if line.startswith(b"data:"):
            chunk = _json(line[5:])
            if isinstance(chunk, dict) and chunk.get("usage"):
                return chunk
    return None


def _asks_stream(data: bytes) -> bool:
    out = _json(data)
    return isinstance(out, dict) and out.get("stream") is True


def _usage(out) -> dict | None:
    """Token usage of an answer: OpenAI's `usage`, or SGLang's `meta_info` (/generate; a batch's summed)."""
    if isinstance(out, list):
        usages = [u for u in map(_usage, out) if u is not None]
        if not usages:
            return None
        return {k: sum(_count(u.get(k)) for u in usages) for k in ("prompt_tokens", "completion_tokens")}
    if not isinstance(out, dict):
        return None
    usage = out.get("usage") or out.get("meta_info")
    if not isinstance(usage, dict) or "prompt_tokens" not in usage:
        return None
    return usage


def _named(exc: RequestTimeout, streamed: bool = False) -> RequestTimeout:
    """A request's own timeout, naming the key that sets it (the attempt's deadline names its own, in the loop)."""
    said = f"{exc} (reward.server.request_timeout_s)"
    if streamed:  # it may have been answering all along: the forwarder passes a stream on once it is whole
        said = (
            f"{str(exc).replace('did not answer within', 'did not finish its stream within')} "
            "(reward.server.request_timeout_s): the forwarder passes a stream on once it is complete; raise it, or "
            "call without stream"
        )
    named = RequestTimeout(said)
    named.extra, named.status = exc.extra, exc.status
    return named
