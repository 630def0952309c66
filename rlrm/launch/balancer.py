"""Client-side load balancing over server replicas: least outstanding requests among the healthy.

    balancer = ReplicaBalancer(["http://127.0.0.1:8001", "http://127.0.0.1:8002"])
    body = await balancer.post("/classify", {"input": ids})

A replica that refuses connections or answers 5xx is taken out of rotation and probed on
`/health` until it answers again, then rejoins. Errors come back classified (transient: retry
elsewhere; bad request: do not retry) for the reward loop's fault policy.
"""

from __future__ import annotations

import asyncio
import time

from rlrm.engine.rewards.errors import BadRequest, RequestTimeout, TransientError


class ReplicaBalancer:
    def __init__(self, urls: list[str], api_key: str | None = None, probe_interval_s: float = 0.5):
        if not urls:
            raise ValueError("ReplicaBalancer needs at least one replica URL")
        self.urls = [u.rstrip("/") for u in urls]
        self.outstanding = {u: 0 for u in self.urls}
        self.healthy = {u: True for u in self.urls}
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.probe_interval_s = probe_interval_s
        self._client = None
        self._prober: asyncio.Task | None = None

    @property
    def address(self) -> str:
        """One address for logs and for functions that take a router address."""
        return self.urls[0] if len(self.urls) == 1 else ",".join(self.urls)

    def pick(self) -> str:
        """The healthy replica with the fewest requests in flight (any replica if none is healthy)."""
        pool = [u for u in self.urls if self.healthy[u]] or self.urls
        return min(pool, key=lambda u: self.outstanding[u])

    async def post(self, path: str, body: dict, timeout_s: float) -> dict:
        """POST to one replica; raises TransientError, RequestTimeout or BadRequest."""
        import httpx

        client = self._http()
        url = self.pick()
        self.outstanding[url] += 1
        try:
            resp = await client.post(url + path, json=body, headers=self.headers, timeout=timeout_s)
        except httpx.TimeoutException:
            raise RequestTimeout(f"{url}{path} did not answer within {timeout_s:g} s") from None
        except httpx.TransportError as exc:
            self._mark_down(url)
            raise TransientError(f"{url}{path}: {type(exc).__name__}: {exc}") from None
        finally:
            self.outstanding[url] -= 1
        if resp.status_code >= 500:
            if resp.status_code != 503:  # 503 is load shedding: the replica is alive
                self._mark_down(url)
            raise TransientError(f"{url}{path} answered {resp.status_code}: {_message(resp)}")
        if resp.status_code >= 400:
            raise BadRequest(f"{url}{path} answered {resp.status_code}: {_message(resp)}")
        return resp.json()

    def _http(self):
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(limits=httpx.Limits(max_connections=512, max_keepalive_connections=512))
        return self._client

    def _mark_down(self, url: str) -> None:
        self.healthy[url] = False
        if self._prober is None or self._prober.done():
            self._prober = asyncio.get_running_loop().create_task(self._probe())

    async def _probe(self) -> None:
        """Bring replicas back once /health answers 200."""
        import httpx

        client = self._http()
        while not all(self.healthy.values()):
            for url in [u for u in self.urls if not self.healthy[u]]:
                try:
                    resp = await client.get(url + "/health", timeout=2.0)
                    self.healthy[url] = resp.status_code == 200
                except httpx.HTTPError:
                    pass
            await asyncio.sleep(self.probe_interval_s)

    async def wait_healthy(self, timeout_s: float) -> None:
        """Return when every replica answers /health (readiness), else raise TransientError."""
        import httpx

        client = self._http()
        deadline = time.monotonic() + timeout_s
        while True:
            states = []
            for url in self.urls:
                try:
                    states.append((await client.get(url + "/health", timeout=2.0)).status_code == 200)
                except httpx.HTTPError:
                    states.append(False)
            if all(states):
                return
            if time.monotonic() > deadline:
                down = [u for u, ok in zip(self.urls, states) if not ok]
                raise TransientError(f"reward servers not healthy after {timeout_s:g} s: {', '.join(down)}")
            await asyncio.sleep(0.2)

    async def close(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _message(resp) -> str:
    try:
        return resp.json()["error"]["message"]
    except Exception:
        return resp.text[:200]
