"""The rollout engine that generates on inference servers: policy replicas behind the router, weights synced.

    engine = ServerRolloutEngine(fleet, wire_for("embedded"), WeightFiles(), expect=TrainerModel(...))
    await engine.start()                                  # replicas up, tokenizer checked
    completion = await engine.generate(prompt_ids, SamplingParams(seed=7))
    engine.update_weights(actor.policy_state_dict(), version=step)   # every replica loads it, or the step fails
    await engine.close()

The same `RolloutEngine` contract as the in-process hf engine (rlrm/inference/base.py), so every
scheduling mode runs on it unchanged. Each request goes to the router (or the least busy healthy
replica); a connection error, 5xx or timeout is retried on another replica (`rollout/retries`, which
also counts the retries the SGLang router made by itself, `rollout/router_retries`). A
completion carries the weight version the server reports; one older than the version in place
when the request was sent (a restarted replica that has not loaded the current weights yet) is
refused and retried, counted as `rollout/stale_refused`, so stale samples never reach training.

`update_weights` writes the weights once (rlrm/inference/weight_files.py) and asks every replica
to load them (rlrm/launch/wire.py); a replica that refuses fails the step with its address and
its message. A launched replica whose process is dead is skipped (`rollout/sync_skipped`): the
supervisor restarts it with `--wait-for-weights` and loads the current version into it before
it reports healthy.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from rlrm.errors import RolloutServerError
from rlrm.inference.base import Completion, SamplingParams
from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.fleet import ServerFleet
from rlrm.reward_errors import BadRequest, TransientError


@dataclass(frozen=True)
class TrainerModel:
    """What the trainer's own model and tokenizer are, for the replicas to be checked against."""

    name: str
    vocab_size: int  # rows of the embedding
    tokenizer_size: int  # len(tokenizer)
    chat_template_sha256: str | None


class ServerRolloutEngine:
    """Generation over HTTP on a fleet of policy servers; see the module docstring.

    Args:
        fleet: the policy fleet (not started; `start` starts it).
        wire: the backend's request and weight-update shapes.
        files: where each version's weights are written.
        expect: the trainer's model, compared with every replica's `/get_model_info` at start.
        api_key, request_timeout_s, sync_timeout_s, max_retries: as `rollout.server` says.
    """

    def __init__(self, fleet: ServerFleet, wire, files: WeightFiles, expect: TrainerModel | None = None,
                 api_key: str | None = None, request_timeout_s: float = 600.0, sync_timeout_s: float = 300.0,
                 max_retries: int = 3):
        self.fleet, self.wire, self.files, self.expect = fleet, wire, files, expect
        self.api_key = api_key
        self.request_timeout_s, self.sync_timeout_s, self.max_retries = request_timeout_s, sync_timeout_s, max_retries
        self.fleet.on_restart = self._load_into_restarted
        self.version = 0
        self.max_context: int | None = None
        self.balancer = None
        self.counters = {"rollout/retries": 0, "rollout/stale_refused": 0, "rollout/sync_skipped": 0}
        self.sync_times = {"write_s": 0.0, "load_s": 0.0}
        self.busy_intervals: list[tuple[float, float]] = []
        self._restarts_seen = 0
        self._started = False
        self._start_lock: asyncio.Lock | None = None

    dtype = None  # another process: its log-probs may differ from the actor's (rlrm/engine/behaviour.py)

    async def start(self) -> None:
        """Start (or reach) the replicas, check them against the trainer's model, load pending weights."""
        from rlrm.launch.balancer import ReplicaBalancer

        if self._started:
            return
        try:
            await self.fleet.start(check_timeout_s=min(self.request_timeout_s, 60.0))
            self.balancer = ReplicaBalancer(self.fleet.urls, api_key=self.api_key)
            await self.balancer.wait_healthy(self.fleet.cfg.start_timeout_s)
            await asyncio.to_thread(self._check_replicas)
            if self.files.current is not None:  # weights given before start (a resumed run)
                await asyncio.to_thread(self._push_all, self.files.current, self.version)
            self._started = True
        except BaseException:
            await self.close()
            raise

    async def _ensure_started(self) -> None:
        if self._started:
            return
        self._start_lock = self._start_lock or asyncio.Lock()
        async with self._start_lock:
            await self.start()

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """One response from a replica (retried on others); raises RolloutServerError when none can answer."""
        import random

        await self._ensure_started()
        prompt_ids = [int(t) for t in prompt_ids]
        if not prompt_ids:
            raise ValueError("empty prompt: a request needs at least one prompt token")
        if self.max_context and len(prompt_ids) + sampling.max_new_tokens > self.max_context:
            raise RolloutServerError(
                f"prompt of {len(prompt_ids)} tokens + {sampling.max_new_tokens} new tokens exceeds the rollout servers' "
                f"{self.max_context}-token context; lower data.max_prompt_length or rollout.max_new_tokens"
            )
        seed = sampling.seed if sampling.seed is not None else random.getrandbits(62)
        body = self.wire.request(prompt_ids, sampling, seed)
        sent_version, last, tried = self.version, "no attempt", set()
        start = time.perf_counter()
        try:
            for attempt in range(self.max_retries + 1):
                if attempt:
                    self.counters["rollout/retries"] += 1
                    await asyncio.sleep(min(1.0, 0.05 * 2 ** (attempt - 1)))
                url = self._pick(tried)
                tried.add(url)
                try:
                    answer = await self.balancer.post(self.wire.generate_path, body, self.request_timeout_s, url=url)
                except TransientError as exc:
                    last = str(exc)
                    continue
                except BadRequest as exc:
                    raise RolloutServerError(f"a rollout server refused a request: {exc}") from None
                try:
                    tokens, log_probs, finish, version = self.wire.parse(answer)
                except (KeyError, IndexError, TypeError, ValueError) as exc:
                    raise RolloutServerError(
                        f"a rollout server answered {self.wire.generate_path} without {exc}: is it a {self.wire.name} policy server?"
                    ) from None
                if self._stale(version, sent_version):
                    self.counters["rollout/stale_refused"] += 1
                    last = f"answered with weight version {version}, older than {sent_version}"
                    continue
                return Completion(prompt_ids, tokens, log_probs, finish,
                                  policy_version=sent_version if version is None else version, meta={"seed": seed})
        finally:
            self.busy_intervals.append((start, time.perf_counter()))
        raise RolloutServerError(f"rollout request failed after {self.max_retries + 1} attempts; last: {last}")

    def _pick(self, tried: set[str]) -> str:
        """The least busy healthy replica not tried yet for this request (the router, when one is in front)."""
        b = self.balancer
        fresh = [u for u in b.urls if b.healthy[u] and u not in tried]
        return min(fresh, key=lambda u: b.outstanding[u]) if fresh else b.pick()

    def _stale(self, version: int | None, sent_version: int) -> bool:
        if not self.wire.carries_version:
            return False
        if version is None:  # a server that never loaded rlrm's weights ("default")
            return sent_version > 0
        return version < sent_version

    def update_weights(self, state_dict: dict, version: int) -> None:
        """Write the weights once, load them into every replica; completions sent afterwards carry `version`.

        Raises:
            RolloutServerError: the weights cannot be written (full disk), or a replica refused them (named).
        """
        t0 = time.perf_counter()
        path = self.files.write(state_dict, version)
        self.sync_times["write_s"] += time.perf_counter() - t0
        self.version = version  # a replica restarted from here on loads this one
        if not self._started:
            return  # loaded into every replica at start
        t1 = time.perf_counter()
        self._push_all(path, version)
        self.sync_times["load_s"] += time.perf_counter() - t1
        self.files.keep_only(path)

    def _push_all(self, path, version: int) -> None:
        urls = list(self.fleet.replica_urls)
        with ThreadPoolExecutor(max_workers=max(1, len(urls))) as pool:
            outcomes = list(pool.map(lambda u: self._push_one(u, path, version, may_be_dead=True), urls))
        for url, failure in zip(urls, outcomes):
            if failure is not None:
                raise RolloutServerError(f"rollout replica {url} refused weights version {version}: {failure}")

    def _push_one(self, url: str, path, version: int, may_be_dead: bool = False) -> str | None:
        """Load version `version` into one replica; None when done (or skipped: dead, restarted later), else why not."""
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        for call, payload in self.wire.sync_calls(str(path), version):
            try:
                resp = httpx.post(url + call, json=payload, headers=headers, timeout=self.sync_timeout_s)
            except httpx.TransportError as exc:
                if may_be_dead and self._dead(url):
                    self.counters["rollout/sync_skipped"] += 1
                    return None  # the supervisor restarts it and loads the current version first
                return f"{type(exc).__name__}: {exc}"
            if resp.status_code != 200:
                return f"POST {call} answered {resp.status_code}: {resp.text[:200]}"
            try:
                answer = resp.json()
            except ValueError:
                answer = None  # vLLM's /reset_prefix_cache answers an empty 200
            failure = self.wire.sync_failure(call, answer)
            if failure:
                return failure
        return None

    def _dead(self, url: str) -> bool:
        """A launched replica that is down or being restarted (its restart loads the current version)."""
        pool = self.fleet.pool
        return pool is not None and (url in pool.restarting or any(s.url == url and not s.alive() for s in pool.servers))

    async def _load_into_restarted(self, url: str) -> None:
        """The supervisor's hook: the current weights into a restarted replica before it may serve."""
        while True:
            version, path = self.version, self.files.current
            if path is None:  # nothing trained yet: the base weights are the current ones
                path = self.fleet.model_path
            failure = await asyncio.to_thread(self._push_one, url, path, version)
            if failure is not None:
                raise RolloutServerError(f"restarted rollout replica {url} did not load weights version {version}: {failure}")
            if self.version == version:  # no newer version arrived meanwhile
                return

    def _check_replicas(self) -> None:
        """Every replica's model info against the trainer's (when the server reports it)."""
        import httpx

        if self.expect is None:
            return
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        contexts = []
        for url in self.fleet.replica_urls:
            try:
                resp = httpx.get(url + "/get_model_info", headers=headers, timeout=30.0)
                info = resp.json() if resp.status_code == 200 else {}
            except (httpx.HTTPError, ValueError):
                info = {}
            for key, label in (("vocab_size", "vocabulary (embedding rows)"), ("tokenizer_size", "tokenizer size"),
                               ("chat_template_sha256", "chat template (sha256)")):
                theirs, ours = info.get(key), getattr(self.expect, key)
                if theirs is not None and ours is not None and theirs != ours:
                    raise RolloutServerError(
                        f"rollout replica {url} serves {info.get('model_path', '?')} with {label} {theirs}, but the trainer's "
                        f"policy {self.expect.name} has {ours}: serve the policy's own model and tokenizer"
                    )
            if isinstance(info.get("max_context_length"), int):
                contexts.append(info["max_context_length"])
        self.max_context = min(contexts) if contexts else None

    def take_metrics(self) -> dict:
        """rollout/* counters and weight-sync times since the last call."""
        out = {k: float(v) for k, v in self.counters.items()}
        restarts = self.fleet.restarts
        out["rollout/replica_restarts"] = float(restarts - self._restarts_seen)
        self._restarts_seen = restarts
        out["timing_s/weight_write"], out["timing_s/weight_load"] = self.sync_times["write_s"], self.sync_times["load_s"]
        if self.fleet.router_counters is not None:  # the router retries a dead replica's requests by itself
            router = {k.replace("reward/", "rollout/"): v for k, v in self.fleet.router_counters.take().items()}
            out.update(router)
            out["rollout/retries"] += router.get("rollout/router_retries", 0.0)
        self.counters = dict.fromkeys(self.counters, 0)
        self.sync_times = dict.fromkeys(self.sync_times, 0.0)
        return out

    def take_busy_intervals(self) -> list[tuple[float, float]]:
        """(start, end) of every request since the last call (the trainer unions them into rollout busy time)."""
        taken, self.busy_intervals = self.busy_intervals, []
        return taken

    async def close(self) -> None:
        if self.balancer is not None:
            await self.balancer.close()
            self.balancer = None
        await self.fleet.close()
        self.files.close()
        self._started = False
