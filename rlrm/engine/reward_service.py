"""The reward side of a run: the reward function a profile names, the reward loop around it, and
the servers it calls (a ServerFleet launches, supervises and stops them), behind one balancer.

    service = RewardService(profile.reward, seed=0)
    await service.start()           # servers healthy, balancer ready
    results = await service.loop.score_all(samples)
    await service.close()           # in `finally`
"""

from __future__ import annotations

import asyncio
import sys
from typing import Callable

from rlrm.config.reward import RewardConfig
from rlrm.engine.models.tiny import resolve_model_path
from rlrm.engine.rewards.base import RewardFn
from rlrm.engine.rewards.cache import RewardCache
from rlrm.engine.rewards.contract import RewardContract, reward_contract
from rlrm.engine.rewards.factory import build_reward_fn, with_injection
from rlrm.engine.rewards.fsdp_disrm.disrm import LegacyDisRM
from rlrm.engine.rewards.limits import RateLimiter
from rlrm.engine.rewards.loop import RewardLoop
from rlrm.engine.rewards.model_identity import local_identity, served_identity, source_digest
from rlrm.engine.rewards.ray_workers import RayRewardWorkers
from rlrm.errors import ConfigError
from rlrm.launch.client.balancer import ReplicaBalancer
from rlrm.launch.fleet.pool import ServerPool
from rlrm.launch.fleet.process import ServerProcess
from rlrm.launch.fleet.router import RouterCounters
from rlrm.launch.fleet.server_fleet import ServerFleet, fleet_key
from rlrm.launch.server.sleep import DRAIN_S


class RewardService:
    """Args: max_response_len: the rollout's max_new_tokens, for reward.overlong (None: no overlong penalty)."""

    def __init__(self, cfg: RewardConfig, seed: int = 0, max_response_len: int | None = None):
        self.cfg, self.seed, self.max_response_len = cfg, seed, max_response_len
        self.pool: ServerPool | None = None
        self.router: ServerProcess | None = None
        self.balancer: ReplicaBalancer | None = None
        self._loop: RewardLoop | None = None  # `loop`, made by start()
        self.workers: RayRewardWorkers | None = None  # Ray reward workers, with executor: ray
        self.legacy: LegacyDisRM | None = None  # the in-trainer legacy DisRM, with disrm.scorer: legacy
        self.api_key: str | None = None  # reward.server.api_key_env's, or a fresh one; kept out of every config
        self.headers: dict[str, str] = {}  # reward.server.headers_env's values: in memory only, like the key
        # the SGLang router's own retries and upstream errors, when it is in front
        self.router_counters: RouterCounters | None = None
        self.fleet: ServerFleet | None = (
            None  # the reward servers (rlrm/launch/fleet/server_fleet.py): launched replicas or addresses, router
        )
        self.model_path: str | None = None  # the reward model's folder (`reward.server.model` resolved at start)
        # stops what the reward function started (a custom function's worker processes)
        self._close_fn: Callable[[], None] | None = None
        self.contract: RewardContract | None = None  # what decides a score (rlrm/engine/rewards/contract.py)
        self.cache: RewardCache | None = None  # reward.cache, in front of the loop's scoring
        self.disrm_tokenizer = None  # a DisRM tokenizer other than its folder's (parity's --template), set before start

    @property
    def loop(self) -> RewardLoop:
        """The reward loop around the reward function (made by `start`)."""
        if self._loop is None:
            raise RuntimeError("the reward service has no reward loop before start()")
        return self._loop

    @loop.setter
    def loop(self, loop: RewardLoop) -> None:
        self._loop = loop

    async def start(self) -> None:
        """Launch (or reach) the reward servers, then build the reward function and loop."""
        kind = self.cfg.model_kind
        try:
            if kind == "disrm" and self.cfg.disrm.scorer == "legacy":
                await self._start_legacy()
            elif kind is not None:
                await self._start_servers(kind)
            counters = self.router_counters.take if self.router_counters is not None else None
            self.contract = await self._contract()
            self.cache = RewardCache.open(
                self.cfg.cache, self.cfg.kind, self.contract.fingerprint, self.cfg.samples_verdicts
            )
            self.loop = RewardLoop(
                self._reward_fn(),
                self.cfg,
                seed=self.seed,
                counters=counters,
                max_response_len=self.max_response_len,
                cache=self.cache,
            )
        except BaseException:
            await self.close()  # whatever was started is stopped again
            raise

    async def _start_servers(self, kind: str) -> None:
        server = self.cfg.server
        self.api_key = fleet_key(
            server.fleet_spec(), server.read_api_key()
        )  # launched servers: a fresh key of this run's own
        self.headers = server.read_headers()  # an unset variable stops here, named, before anything starts
        self.model_path = resolve_model_path(self._served_model())
        self.fleet = ServerFleet(
            server.fleet_spec(),
            role=kind,
            model_path=self.model_path,
            api_key=self.api_key,
            ray_address=self.cfg.ray_address,
            headers=self.headers,
        )
        await self.fleet.start(check_timeout_s=server.request_timeout_s)
        self.pool, self.router, self.router_counters = self.fleet.pool, self.fleet.router, self.fleet.router_counters
        behind = self.pool.urls if self.router is not None and self.pool is not None else None
        self.balancer = ReplicaBalancer(
            self.fleet.urls, api_key=self.api_key, headers=self.headers, behind_router=behind
        )
        await self.balancer.wait_healthy(server.start_timeout_s)
        if self.router_counters is not None:
            await asyncio.to_thread(self.router_counters.take)  # from here on: what the run's requests cost
        await self.sleep()  # colocated: asleep until the first scoring

    async def _start_legacy(self) -> None:
        self.model_path = resolve_model_path(self._served_model())
        self.legacy = LegacyDisRM(self.cfg, self.model_path)
        await self.legacy.start()

    def _served_model(self) -> str:
        if self.cfg.server.model is None:  # the profile's validation refuses a reward model kind without one
            raise ConfigError(
                f"reward.kind={self.cfg.kind} needs reward.server.model (the reward model's folder or hub id)"
            )
        return self.cfg.server.model

    async def _contract(self) -> RewardContract:
        """The reward contract: the section, the model's identity (its files, or what running servers report)."""
        server, model = self.cfg.server, None
        if self.cfg.model_kind is not None and self.model_path is not None and not server.addresses:
            model = await asyncio.to_thread(local_identity, self._served_model(), self.model_path)
        elif self.cfg.model_kind is not None:
            model = await served_identity(self.balancer, server.request_model, server.request_timeout_s)
        source = source_digest(self.cfg.custom.path) if self.cfg.kind == "custom" else None
        return reward_contract(self.cfg, model, source, max_response_len=self.max_response_len)

    async def wake(self) -> None:
        """Colocated placement: bring every replica's weights back before scoring."""
        await self._post_all("/wake_up")

    async def sleep(self) -> None:
        """Colocated placement: every replica's weights off the accelerator until the next scoring."""
        await self._post_all("/sleep?level=1", wait_s=DRAIN_S)  # a sleep first waits for requests in flight

    async def _post_all(self, path: str, wait_s: float = 0.0) -> None:
        """`path` to every replica. A dead one (the supervisor restarts it) is said and left to the balancer, which
        routes around it, as standalone placement does; a live one that refused, or none answering, raises."""
        if self.cfg.placement != "colocated" or self.pool is None or self.balancer is None:
            return
        urls = list(self.pool.urls)
        answers = await asyncio.gather(
            *(self.balancer.post(path, {}, self.cfg.server.start_timeout_s + wait_s, url=url) for url in urls),
            return_exceptions=True,
        )
        failed = {url: a for url, a in zip(urls, answers) if isinstance(a, BaseException)}
        for url, answer in failed.items():
            if not isinstance(answer, Exception):  # a cancellation or an interrupt: the run's own, not the replica's
                raise answer
            if self.pool.alive(url):  # a live replica that did not wake (or sleep) would answer 503, or hold the GPU
                raise answer
        for url, error in failed.items():
            print(f"rlrm: reward replica {url} did not answer {path}: {error}", file=sys.stderr, flush=True)
        if failed and len(failed) == len(urls):
            raise next(iter(failed.values()))  # none answered: the first replica's error, as before

    def _reward_fn(self) -> RewardFn:
        if self.legacy is not None:
            return with_injection(self.legacy, self.cfg)
        urls: list[str] = self.balancer.urls if self.balancer is not None else []
        model_path = self.model_path
        if self.cfg.executor == "ray":  # one limiter actor for every worker: the run's limits, not N times them
            self.workers = RayRewardWorkers(self.cfg, urls, model_path, api_key=self.api_key, headers=self.headers)
            self.workers.start()
            return self.workers.score
        fn = build_reward_fn(
            self.cfg, self.balancer, model_path, RateLimiter.from_config(self.cfg.limits), self.disrm_tokenizer
        )
        self._close_fn = fn.close  # a custom function's worker processes
        return fn

    async def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
        if self._close_fn is not None:
            self._close_fn()
        if self.legacy is not None:
            await self.legacy.close()
        if self.workers is not None:
            self.workers.close()
        if self.balancer is not None:
            await self.balancer.close()
        if self.fleet is not None:
            await self.fleet.close()
