"""Client-side load balancing over server replicas: least outstanding requests among the healthy.

    balancer = ReplicaBalancer(["http://127.0.0.1:8001", "http://127.0.0.1:8002"])
    body = await balancer.post("/classify", {"input": ids})

A replica that refuses connections or answers 5xx is taken out of rotation and probed on
`/health` until it answers again, then rejoins. A replica that is alive but hung (its /health answers, its
requests never do) is taken out after HUNG_AFTER timeouts in a row during which it answered nothing at all, and
stays out for a quarantine (first the request timeout, doubled at each relapse, at most QUARANTINE_MAX_S) before
its /health is believed again: a probe alone would re-admit it at once. Errors come back classified (transient: retry
elsewhere; bad request: do not retry) for the reward loop's fault policy.

The client is aiohttp, rlrm's one HTTP client library (rlrm/launch/common/http.py runs it for synchronous
callers): with 256 requests in flight, httpx's async pool took 2.1 s for 256 trivial `/health` calls against
0.2-0.4 s for aiohttp (measured here, same server), and reward traffic is exactly that shape.
"""

from __future__ import annotations

import asyncio
import errno
import json
import time

from rlrm.call_errors import BadRequest, CallError, RequestTimeout, Throttled, TransientError, retry_after_s
from rlrm.launch.common.http import Reply, Sessions
from rlrm.launch.common.no_proxy import proxy_for
from rlrm.launch.fleet.process import ServerStartError
from rlrm.open_files import open_files_limit

HUNG_AFTER = 2  # timeouts in a row, with no answer at all from the replica meanwhile, that take it out of rotation
QUARANTINE_MAX_S = 600.0


class ReplicaBalancer:
    def __init__(
        self,
        urls: list[str],
        api_key: str | None = None,
        probe_interval_s: float = 0.5,
        headers: dict[str, str] | None = None,
        behind_router: list[str] | None = None,
    ):
        if not urls:
            raise ValueError("ReplicaBalancer needs at least one replica URL")
        self.urls = [u.rstrip("/") for u in urls]
        # the replicas behind a router (urls is the router): for the requests it cannot route (`_router_cannot`)
        self.behind_router = [u.rstrip("/") for u in behind_router or []]
        self.outstanding = {u: 0 for u in self.urls}
        self.healthy = {u: True for u in self.urls}
        self._turn = -1  # which of the replicas tied for least busy goes next (`least_busy`)
        # `headers`: extra ones a hosted API wants on every request (reward.server.headers_env)
        self.headers = {**(headers or {}), **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
        self.probe_interval_s = probe_interval_s
        self._sessions = Sessions()
        self._prober: asyncio.Task | None = None
        self._closed = False  # requests cut off by close() must not start a prober on the closing session
        # hung replicas: when each last answered anything, its timeouts since, and until when it stays out
        self._answered_at = {u: 0.0 for u in self.urls}
        self._silent_timeouts = {u: 0 for u in self.urls}
        self._quarantine_s = {u: 0.0 for u in self.urls}
        self._out_until = {u: 0.0 for u in self.urls}

    @property
    def address(self) -> str:
        """One address for logs and for functions that take a router address."""
        return self.urls[0] if len(self.urls) == 1 else ",".join(self.urls)

    def pick(self) -> str:
        """The healthy replica with the fewest requests in flight (any replica if none is healthy)."""
        return self.least_busy([u for u in self.urls if self.healthy[u]] or self.urls)

    def least_busy(self, urls: list[str]) -> str:
        """Of `urls`, the one with the fewest requests in flight; replicas tied for it take turns. Requests that
        come one at a time always tie (none in flight anywhere): the first replica would get every one of them."""
        least = min(self.outstanding.get(u, 0) for u in urls)
        tied = [u for u in urls if self.outstanding.get(u, 0) == least]
        if len(tied) == 1:
            return tied[0]
        self._turn += 1
        return tied[self._turn % len(tied)]

    async def post(self, path: str, body: dict, timeout_s: float, url: str | None = None) -> dict:
        """POST to one replica (the least busy, or `url`); raises TransientError, RequestTimeout or BadRequest."""
        url = url.rstrip("/") if url else self.pick()
        # `url` may be a replica behind a router (a colocated server's /sleep): counted, never taken out of rotation
        self.outstanding[url] = self.outstanding.get(url, 0) + 1
        reply = await self._send(url, "POST", path, timeout_s, json=body, headers=self.headers)
        status, text = reply.status, reply.body.decode("utf-8", "replace")
        if status >= 500:
            if status != 503:  # 503 is load shedding: the replica is alive
                self._mark_down(url)
            error: CallError = TransientError(f"{url}{path} answered {status}: {_message(text)}")
        elif status >= 400:
            error = BadRequest(f"{url}{path} answered {status}: {_message(text)}")
        else:
            return json.loads(text)
        error.status = status
        raise error

    async def forward(self, method: str, path: str, data: bytes, timeout_s: float) -> tuple[int, bytes, str, str]:
        """Send one request as it came (a custom reward function's own call) to the least busy replica.

        Returns (status, body, Content-Type as the replica sent it, the replica's URL); raises RequestTimeout or TransientError when no
        answer came, Throttled for a 429 (or a 503 with Retry-After). Any other answer is not judged here: the
        caller passes it on as it is.
        """
        url = self.least_busy(self.behind_router) if self.behind_router and _router_cannot(path, data) else self.pick()
        self.outstanding[url] = self.outstanding.get(url, 0) + 1
        headers = {**self.headers, "Content-Type": "application/json"}
        reply = await self._send(url, method, path, timeout_s, data=data or None, headers=headers)
        # the whole header: a charset parameter is what decodes a text body right in the caller's client
        return reply.status, reply.body, reply.headers.get("Content-Type") or reply.content_type, url

    async def _send(self, url: str, method: str, path: str, timeout_s: float, **kwargs) -> Reply:
        """One request to `url`, whose in-flight count the caller has just raised (lowered here once it is
        answered). No answer: RequestTimeout, or TransientError with the replica marked down. A 429 (or a 503
        with Retry-After): Throttled. Any other answer is returned for the caller to judge."""
        import aiohttp

        sent_at = time.monotonic()
        try:
            timeout = aiohttp.ClientTimeout(total=timeout_s)
            reply = await self._sessions.send(method, url + path, timeout=timeout, **kwargs)
        except asyncio.TimeoutError:
            self._timed_out(url, sent_at, timeout_s)
            raise RequestTimeout(f"{url}{path} did not answer within {timeout_s:g} s") from None
        except aiohttp.ClientError as exc:
            if _out_of_files(exc):  # this process, not the replica: no retry helps, and the replica is not down
                raise CallError(
                    f"{url}{path}: this process has used up its open-files limit (ulimit -n {open_files_limit() or 'unlimited'}): "
                    "raise it, or lower reward.max_concurrency"
                ) from None
            self._mark_down(url)
            raise TransientError(f"{url}{path}: {type(exc).__name__}: {exc}") from None
        finally:
            self.outstanding[url] -= 1
        self._answered(url)
        wait_s = retry_after_s(reply.headers.get("Retry-After"))
        if reply.status == 429 or (reply.status == 503 and wait_s is not None):
            text = reply.body.decode("utf-8", "replace")
            raise Throttled(f"{url}{path} answered {reply.status}: {_message(text)}", wait_s)
        return reply

    async def _get_ok(self, url: str) -> bool:
        """Ready: /health answers 200, or (an OpenAI-compatible API with no /health) GET /v1/models with the key."""
        import aiohttp

        try:
            timeout = aiohttp.ClientTimeout(total=2.0)
            # with the key and headers every request carries: a gateway in front may refuse /health without them
            proxy = proxy_for(url)  # a hosted API: through the shell's proxy
            session = self._sessions.pooled
            async with session.get(url + "/health", headers=self.headers, timeout=timeout, proxy=proxy) as resp:
                if resp.status != 404:
                    return resp.status == 200
            async with session.get(url + "/v1/models", headers=self.headers, timeout=timeout, proxy=proxy) as resp:
                return resp.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return False

    def _answered(self, url: str) -> None:
        if url in self._answered_at:
            self._answered_at[url] = time.monotonic()
            self._silent_timeouts[url] = 0
            self._quarantine_s[url] = 0.0

    def _timed_out(self, url: str, sent_at: float, timeout_s: float) -> None:
        """A request to `url` got no answer in time. A replica that answered other requests meanwhile is slow, not
        hung; one that answered nothing for HUNG_AFTER such requests in a row is taken out for a quarantine."""
        if url not in self._answered_at or self._answered_at[url] >= sent_at:
            return
        self._silent_timeouts[url] += 1
        if self._silent_timeouts[url] < HUNG_AFTER:
            return
        self._silent_timeouts[url] = 0
        self._quarantine_s[url] = min(QUARANTINE_MAX_S, max(timeout_s, 2 * self._quarantine_s[url]))
        self._out_until[url] = time.monotonic() + self._quarantine_s[url]
        self._mark_down(url)

    def _mark_down(self, url: str) -> None:
        if url not in self.healthy:  # not one of its replicas (one behind a router): the router judges it
            return
        self.healthy[url] = False
        if self._closed:
            return
        if self._prober is None or self._prober.done():
            self._prober = asyncio.get_running_loop().create_task(self._probe())

    async def _probe(self) -> None:
        """Bring replicas back once /health answers 200."""
        while not all(self.healthy.values()):
            for url in [u for u in self.urls if not self.healthy[u]]:
                if time.monotonic() >= self._out_until[url]:
                    self.healthy[url] = await self._get_ok(url)
            await asyncio.sleep(self.probe_interval_s)

    async def wait_healthy(self, timeout_s: float, what: str = "reward servers") -> None:
        """Return when every replica answers /health (readiness), else raise ServerStartError (one line for the user)."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = [await self._get_ok(url) for url in self.urls]
            if all(states):
                return
            if time.monotonic() > deadline:
                down = [u for u, ok in zip(self.urls, states) if not ok]
                raise ServerStartError(f"{what} not healthy after {timeout_s:g} s: {', '.join(down)}")
            await asyncio.sleep(0.2)

    async def close(self) -> None:
        self._closed = True
        if self._prober is not None:
            self._prober.cancel()
        await self._sessions.close()


def _router_cannot(path: str, data: bytes) -> bool:
    """A request the SGLang router refuses though its replicas serve it: /v1/completions with a prompt of token ids
    (sglang-router 0.3.2 takes only text there: 422 "did not match any variant of untagged enum StringOrArray")."""
    if path.split("?")[0].rstrip("/") != "/v1/completions" or not data:
        return False
    try:
        prompt = json.loads(data).get("prompt")
    except (ValueError, AttributeError):
        return False
    return isinstance(prompt, list) and bool(prompt) and all(type(t) is int for t in prompt)


def _message(text: str) -> str:
    try:
        return json.loads(text)["error"]["message"]
    except Exception:
        return text[:200]


def _out_of_files(exc: BaseException) -> bool:
    """Whether a client error is this process out of file descriptors (EMFILE, or the system's ENFILE)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.EMFILE, errno.ENFILE):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
