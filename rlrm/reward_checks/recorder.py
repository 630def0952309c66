"""What a reward function sent to its server and what came back, per sample, without changing either.

    recorder = Recorder(service.balancer)
    fn = recorder.wrap(build_reward_fn(cfg, recorder, model_path))   # the trainer's reward function
    ...                                                               # scored through the reward loop
    recorder.exchanges[sample.index][-1]    # {"path", "request", "response"} or {"path", "request", "error"}

The recorder stands where the balancer stands (same `post`), so the reward function, the reward
loop and the servers are exactly the trainer's; it only keeps a copy of each request and answer.
A context variable set by `wrap` tells which sample a request belongs to (retries add exchanges).
"""

from __future__ import annotations

import contextvars
from collections import defaultdict

from rlrm.engine.rewards.base import RewardFn, RewardSample

_SAMPLE: contextvars.ContextVar[int | None] = contextvars.ContextVar("rlrm_inspect_sample", default=None)


class Recorder:
    def __init__(self, balancer):
        self.balancer = balancer
        self.exchanges: dict[int, list[dict]] = defaultdict(list)

    @property
    def urls(self) -> list[str]:
        return self.balancer.urls

    @property
    def address(self) -> str:
        return self.balancer.address

    @property
    def headers(self) -> dict[str, str]:
        """The balancer's own (the key, reward.server.headers_env's): a function's tokenizer check reads them."""
        return self.balancer.headers

    async def post(self, path: str, body: dict, timeout_s: float, url: str | None = None) -> dict:
        entry: dict = {"path": path, "request": body}
        index = _SAMPLE.get()
        if index is not None:
            self.exchanges[index].append(entry)
        try:
            entry["response"] = await self.balancer.post(path, body, timeout_s, url=url)
        except Exception as exc:
            entry["error"] = str(exc)
            raise
        return entry["response"]

    async def forward(self, method: str, path: str, data: bytes, timeout_s: float):
        """A custom function's own call, passed on as it came (its ledger keeps what `inspect` shows of it)."""
        return await self.balancer.forward(method, path, data, timeout_s)

    def wrap(self, fn: RewardFn) -> RewardFn:
        """`fn`, with the requests it makes filed under the sample it scores."""

        async def recorded(sample: RewardSample):
            _SAMPLE.set(sample.index)  # this call runs in its own task: the setting stays inside it
            return await fn(sample)

        recorded.__name__ = getattr(fn, "__name__", "reward")
        return recorded

    def last(self, index: int) -> dict | None:
        """The sample's last exchange with the server (after any retries), or None."""
        found = self.exchanges.get(index)
        return found[-1] if found else None
