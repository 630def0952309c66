"""The rollout engine that generates on inference servers: policy replicas behind the router, weights synced.

    engine = ServerRolloutEngine(fleet, wire_for("embedded"), WeightFiles(), expect=TrainerModel(...))
    await engine.start()                                  # replicas up, tokenizer checked
    completion = await engine.generate(prompt_ids, SamplingParams(seed=7))
    engine.update_weights(actor.policy_state_dict(), version=step)   # every replica loads it, or the step fails
    await engine.close()

The same `RolloutEngine` contract as the in-process hf engine (rlrm/inference/base.py), so every
scheduling mode runs on it unchanged. The requests made in one turn of the event loop (a step's
groups) go out as a few batched `/generate` calls (SGLang's list form, at most 64 each, about one
per replica): one HTTP round trip per request cost as much as the tiny policy's generation itself.
Through the SGLang router they go one by one (0.3.2 refuses the batch form with per-request
sampling_params: 422).
Each call goes to the router (or the least busy healthy replica); a connection error, 5xx or timeout is retried on another replica (`rollout/retries`, which
also counts the retries the SGLang router made by itself, `rollout/router_retries`). A
completion carries the weight version the server reports; one older than the version in place
when the request was sent (a restarted replica that has not loaded the current weights yet) is
refused and retried, counted as `rollout/stale_refused`, so stale samples never reach training.
A replica whose queue is full (503 with Retry-After, or 429) asks to be called later: the call waits (at most
1 s at a time) and goes again, to another replica when one is free, counted as `rollout/throttled`; for up to
request_timeout_s in all, it is neither a failure nor a retry (a step of more requests than a replica queues
once failed after 4 attempts in under a second).

`update_weights` writes the weights once (rlrm/inference/weight_files.py) and asks every replica
to load them (rlrm/launch/client/wire.py); a replica that refuses fails the step with its address and
its message. A launched replica whose process is dead is skipped (`rollout/sync_skipped`): the
supervisor restarts it with `--wait-for-weights` and loads the current version into it before
it reports healthy.

With `weight_sync: distributed` (rlrm/launch/client/weight_broadcast.py) nothing is written: at start the
trainer builds a process group with the replicas (SGLang's /init_weights_update_group) and
`update_weights` broadcasts every tensor to them (/update_weights_from_distributed,
`timing_s/weight_broadcast`). The group is rebuilt (destroyed on the survivors, joined again by
everyone on a fresh port) whenever its members change: a dead replica is left out and counted in
`rollout/sync_skipped`; a broadcast that fails because a member died is sent again to the others.
A restarted replica cannot be given the current weights from disk (none are written, and the
trainer's tensors move on in place while it trains), so it waits with `--wait-for-weights`, out of
rotation, until the next broadcast includes it; before the first update the policy's own files
are the current weights and it loads those at once.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import nullcontext
from dataclasses import dataclass

from rlrm.call_errors import BadRequest, Throttled, TransientError
from rlrm.errors import RolloutServerError
from rlrm.inference.base import Completion, SamplingParams
from rlrm.inference.weight_files import ServingCast, WeightFiles
from rlrm.launch.client.balancer import ReplicaBalancer
from rlrm.launch.client.disk_sync import DiskSync
from rlrm.launch.client.replica_info import TrainerModel, check_replicas
from rlrm.launch.client.version_gate import VersionGate
from rlrm.launch.client.weight_broadcast import FleetBroadcast, WeightBroadcast
from rlrm.launch.fleet.ray_replicas import check_weights_reach
from rlrm.launch.fleet.server_fleet import ServerFleet, death_line

# most requests sent in one batched /generate call (SGLang's list form); the replica batches them with its other requests
MAX_COALESCE = 64
# most times one request waits for a dead replica's restart before each further failure counts as a retry
MAX_RESTART_WAITS = 3


@dataclass
class _Item:
    prompt_ids: list[int]
    sampling: SamplingParams
    seed: int
    sent_version: int  # the version in place when the request was made: an answer from an older one is refused
    future: asyncio.Future
    start: float


class ServerRolloutEngine:
    """Generation over HTTP on a fleet of policy servers; see the module docstring.

    Args:
        fleet: the policy fleet (not started; `start` starts it).
        wire: the backend's request and weight-update shapes.
        files: where each version's weights are written.
        expect: the trainer's model, compared with every replica's `/get_model_info` at start.
        api_key, request_timeout_s, sync_timeout_s, max_retries, weight_sync: as `rollout.server` says.
        sync_backend: weight_sync=distributed: gloo or nccl (`weight_sync_backend` resolved).
        sync_backend_chosen: `sync_backend` was picked by `auto`, not named: nccl falls back to gloo when two
            members of the group share a GPU, which NCCL refuses (named nccl: a one-line error instead).
        policy_device: the trainer's policy's device: an NCCL group joins on it when it is a GPU.
    """

    def __init__(
        self,
        fleet: ServerFleet,
        wire,
        files: WeightFiles,
        expect: TrainerModel | None = None,
        api_key: str | None = None,
        request_timeout_s: float = 600.0,
        sync_timeout_s: float = 300.0,
        max_retries: int = 3,
        weight_sync: str = "disk",
        sync_backend: str = "gloo",
        sync_backend_chosen: bool = False,
        policy_device: str | None = None,
        keep_fp32: tuple[str, ...] = (),
        keep_fp32_in_fp16: tuple[str, ...] = (),
    ):
        self.fleet, self.wire, self.files, self.expect = fleet, wire, files, expect
        # modules the policy's architecture keeps in fp32 (in bf16 and fp16; in fp16 only): synced in fp32 (ServingCast)
        self.keep_fp32, self.keep_fp32_in_fp16 = keep_fp32, keep_fp32_in_fp16
        self.api_key = api_key
        self.request_timeout_s, self.sync_timeout_s, self.max_retries = request_timeout_s, sync_timeout_s, max_retries
        self.fleet.on_restart = self._load_into_restarted
        self.fleet.weights_files = files  # launched replicas load from this run's folder only
        self.version = 0
        self.max_context: int | None = None
        self.balancer: ReplicaBalancer | None = None
        self.counters = {
            "rollout/retries": 0,
            "rollout/stale_refused": 0,
            "rollout/sync_skipped": 0,
            "rollout/throttled": 0,
        }
        self.sync_times = {"write_s": 0.0, "load_s": 0.0, "broadcast_s": 0.0}
        self.broadcast = (
            FleetBroadcast(fleet, WeightBroadcast(wire, sync_backend, sync_timeout_s, api_key, policy_device))
            if weight_sync == "distributed"
            else None
        )
        self.sync_backend_chosen = sync_backend_chosen
        self.replica_gpus: dict[str, str | None] = {}  # each replica's GPU (UUID), from /get_model_info
        # vLLM answers carry no version: the client keeps each request within one (rlrm/launch/client/version_gate.py)
        self.gate = None if wire.carries_version else VersionGate()
        self.disk = DiskSync(fleet, wire, files, api_key, sync_timeout_s, self.counters)
        self.busy_intervals: list[tuple[float, float]] = []
        self._restarts_seen = 0
        self._queue: list[_Item] = []
        self._flush_scheduled = False
        self._tasks: set[asyncio.Task] = set()
        self._started = False
        self._start_lock: asyncio.Lock | None = None

    # the replicas' dtype when every one is rlrm's embedded server (the in-process engine's code, so its log-probs
    # are the actor's up to float noise), "tf32" when they compute float32 in TF32 (--tf32 on a GPU: the precision
    # of an actor with model.tf32); None otherwise: vLLM/SGLang score tokens their own way (rlrm/engine/behaviour.py)
    dtype: str | None = None

    async def start(self) -> None:
        """Start (or reach) the replicas, check them against the trainer's model, load pending weights."""
        if self._started:
            return
        try:
            await self.fleet.start(check_timeout_s=min(self.request_timeout_s, 60.0))
            if self.fleet.pool is not None:  # replicas on other nodes must see the weights folder
                await asyncio.to_thread(check_weights_reach, self.fleet.pool.servers, self.files.parent)
            self.balancer = ReplicaBalancer(self.fleet.urls, api_key=self.api_key)
            await self.balancer.wait_healthy(self.fleet.spec.start_timeout_s, what="rollout servers")
            versions = await asyncio.to_thread(self._check_replicas)
            if self.files.current is not None:  # weights given before start (a resumed run)
                # a running server that served the run before its resume holds that version or a later one, which
                # it would refuse as not increasing: its own weights (version 0) first, then the checkpoint's
                ahead: dict[str, int | None] = {
                    u: v for u, v in versions.items() if v is not None and v >= self.version
                }
                if ahead and self.wire.carries_version:
                    await asyncio.to_thread(self.disk.reset_trained, ahead)
                await asyncio.to_thread(self.disk.push_all, self.files.current, self.version)
            else:
                await asyncio.to_thread(self.disk.reset_trained, versions)
            if self.broadcast is not None:
                self._check_gpus_apart()
                await asyncio.to_thread(self.broadcast.open)
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
        loop = asyncio.get_running_loop()
        item = _Item(prompt_ids, sampling, seed, self.version, loop.create_future(), time.perf_counter())
        self._queue.append(item)
        if not self._flush_scheduled:  # every request made in this turn of the loop goes out together
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        try:
            return await item.future
        finally:
            self.busy_intervals.append((item.start, time.perf_counter()))

    def _flush(self) -> None:
        """Send the queued requests as a few batched calls: about one per replica, at most MAX_COALESCE each."""
        self._flush_scheduled = False
        items, self._queue = self._queue, []
        if not items:
            return
        targets = max(1, len(self.fleet.replica_urls))
        # sglang-router 0.3.2 answers SGLang's batch form with per-request sampling_params 422: one by one through it
        batched = self.wire.batchable and self.fleet.router is None
        size = min(MAX_COALESCE, -(-len(items) // targets)) if batched else 1
        for i in range(0, len(items), size):
            task = asyncio.get_running_loop().create_task(self._send(items[i : i + size]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, items: list[_Item]) -> None:
        """One batched call for `items` (retried, those still missing, on replicas not tried yet); sets their futures."""
        tried: set[str] = set()
        last, failures, restarted = "no attempt", 0, 0
        calm_by: float | None = None  # how long full queues are waited for, from the first one
        try:
            while True:
                url = await self._pick(tried)
                tried.add(url)
                if self.gate is not None:  # no reload while it generates: tagged with the version in force now
                    version = await self.gate.enter(lambda: self.version)
                    for item in items:
                        item.sent_version = version
                throttled: Throttled | None = None
                try:
                    items, last = await self._attempt(items, url, last)
                except Throttled as exc:
                    throttled, last = exc, str(exc)
                finally:
                    if self.gate is not None:
                        self.gate.leave()
                if not items:
                    return
                if throttled is not None:  # its queue is full: wait as asked, no failure, no retry
                    calm_by = calm_by or time.monotonic() + self.request_timeout_s
                    if time.monotonic() < calm_by:
                        self.counters["rollout/throttled"] += len(items)
                        await asyncio.sleep(min(throttled.retry_after_s or 0.25, 1.0))
                        continue
                # a replica that died is restarted by the supervisor: waiting for it uses up no retry
                if self.disk.dead(url) and restarted < MAX_RESTART_WAITS:
                    restarted += 1
                else:
                    failures += 1
                if failures > self.max_retries:
                    raise RolloutServerError(
                        f"rollout request failed after {failures} attempts; last: {last}{self._router_death(url)}"
                    )
                self.counters["rollout/retries"] += len(items)
                await asyncio.sleep(min(1.0, 0.05 * 2 ** max(0, failures - 1)))
        except BaseException as exc:  # every caller gets an answer, never a hang
            for item in items:
                if not item.future.done():
                    item.future.set_exception(
                        exc if isinstance(exc, Exception) else RolloutServerError("rollout engine closed")
                    )
            if not isinstance(exc, Exception):
                raise

    async def _attempt(self, items: list[_Item], url: str, last: str) -> tuple[list[_Item], str]:
        """One call to `url`; sets the futures of the items answered. Returns the items still missing and why."""
        body = self.wire.request_many([(i.prompt_ids, i.sampling, i.seed) for i in items])
        try:
            answer = await self._live_balancer().post(self.wire.generate_path, body, self.request_timeout_s, url=url)
        except Throttled:
            raise  # `_send` waits as the replica asks
        except TransientError as exc:
            return items, str(exc)
        except BadRequest as exc:
            raise RolloutServerError(f"a rollout server refused a request: {exc}") from None
        try:
            parsed = self.wire.parse_many(answer, len(items))
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise RolloutServerError(
                f"a rollout server answered {self.wire.generate_path} without {exc}: is it a {self.wire.name} policy server?"
            ) from None
        missing = []
        for item, (tokens, log_probs, finish, version) in zip(items, parsed):
            if self._stale(version, item.sent_version):
                self.counters["rollout/stale_refused"] += 1
                last = f"answered with weight version {version}, older than {item.sent_version}"
                missing.append(item)
            elif not item.future.done():
                item.future.set_result(
                    Completion(
                        item.prompt_ids,
                        tokens,
                        log_probs,
                        finish,
                        policy_version=item.sent_version if version is None else version,
                        meta={"seed": item.seed},
                    )
                )
        return missing, last

    async def _pick(self, tried: set[str]) -> str:
        """The least busy healthy replica not tried yet for this request (the router, when one is in front).
        A replica being restarted serves only once it holds the current weights; while every launched
        replica is down, or the router in front is dead or being restarted, this waits for the fleet's
        supervisor to bring it back (at most the start timeout and the sync timeout)."""
        b, deadline = self._live_balancer(), None
        while True:
            usable = [u for u in b.urls if b.healthy[u] and not self._restarting(u)]
            fresh = [u for u in usable if u not in tried] or usable
            if fresh:
                return b.least_busy(fresh)
            if self.fleet.pool is None and self.fleet.router is None:
                return b.pick()  # running servers: nobody restarts them, the call fails and is counted
            deadline = deadline or time.monotonic() + self.fleet.spec.start_timeout_s + self.sync_timeout_s
            if time.monotonic() > deadline:
                return b.pick()
            await asyncio.sleep(0.25)

    def _live_balancer(self) -> ReplicaBalancer:
        if self.balancer is None:
            raise RuntimeError("the rollout engine sends requests only after start()")
        return self.balancer

    def _restarting(self, url: str) -> bool:
        """A launched replica being restarted, or the router in front while it is dead or being restarted."""
        pool, router = self.fleet.pool, self.fleet.router
        if router is not None and url == router.url:
            return self.fleet.router_down()
        return pool is not None and url in pool.restarting

    def _router_death(self, url: str) -> str:
        """For a failed request's error: that the router it went to died and is being restarted ('' otherwise)."""
        router = self.fleet.router
        if router is None or url != router.url or not self.fleet.router_down():
            return ""
        death = self.fleet.router_death if router.alive() else death_line(router)
        return f"; the SGLang router died ({death}) and is being restarted on its port"

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
        cast = ServingCast(  # each tensor as the replicas hold it
            self._serving_dtype(), self.keep_fp32, self.keep_fp32_in_fp16, self.fleet.backend.takes_tied_once
        )
        if self.broadcast is not None and self._started:
            t0 = time.perf_counter()
            self.counters["rollout/sync_skipped"] += self.broadcast.send(state_dict, version, cast)
            self.sync_times["broadcast_s"] += time.perf_counter() - t0
            # as on disk: requests made during the broadcast carry the version before, which the replicas answer
            self.version = version
            self._drop_files()
            return
        with self.disk.lock:  # never while a restarted replica loads (rlrm/launch/client/disk_sync.py)
            t0 = time.perf_counter()
            path = self.files.write(state_dict, version, cast)
            self.sync_times["write_s"] += time.perf_counter() - t0
            if not self._started:
                self.version = self.disk.version = version
                return  # loaded into every replica at start
            t1 = time.perf_counter()
            with self.gate.reloading(self.request_timeout_s + 30.0) if self.gate is not None else nullcontext():
                self.disk.version = version  # a replica restarted from here on loads this one
                self.disk.push_all(path, version)
                # requests made meanwhile carry the version before: a replica not loaded yet answers them, not refused
                self.version = version
            self.sync_times["load_s"] += time.perf_counter() - t1
            self.files.keep_only(path)

    def _serving_dtype(self) -> str | None:
        """The dtype the replicas serve in: as they report it (rlrm's embedded server), else as the run launched
        them (rollout.server.dtype); None for running servers that do not say (sent as the trainer holds them)."""
        if self.dtype is not None:
            return "float32" if self.dtype == "tf32" else self.dtype
        return None if self.fleet.spec.addresses else self.fleet.spec.dtype

    def _drop_files(self) -> None:
        """After a broadcast no replica reads the weights written before the first one (a resume's, or those the
        replicas started from): a restarted replica waits for the next broadcast. They would hold a full copy of the
        policy in the weights folder (RAM, under /dev/shm) for the rest of the run."""
        if self.files.current is None:
            return
        with self.disk.lock:
            self.files.keep_only(None)
            self.files.current = None

    async def _load_into_restarted(self, url: str) -> None:
        """The supervisor's hook: the current weights into a restarted replica before it may serve."""
        while True:
            if self.broadcast is not None and self.version != self.disk.version:
                return await self.broadcast.await_broadcast(url)
            version, failure = await asyncio.to_thread(self.disk.load_current, url)
            if failure is not None:
                raise RolloutServerError(
                    f"restarted rollout replica {url} did not load weights version {version}: {failure}"
                )
            if self.version == version:  # no newer version broadcast meanwhile
                return

    def _check_replicas(self) -> dict[str, int | None]:
        """Every replica's model info against the trainer's (rlrm/launch/client/replica_info.py); their versions."""
        urls = self.fleet.replica_urls
        versions, self.max_context, self.dtype, self.replica_gpus = check_replicas(urls, self.api_key, self.expect)
        return versions

    def _check_gpus_apart(self) -> None:
        """Before the group forms: no two members on one GPU where it is NCCL's (WeightBroadcast.keep_gpus_apart),
        checked at start, where every replica has said where it is."""
        if self.broadcast is not None:
            self.broadcast.group.keep_gpus_apart(self.replica_gpus, chosen=self.sync_backend_chosen)

    def take_metrics(self) -> dict:
        """rollout/* counters and weight-sync times since the last call."""
        out = {k: float(v) for k, v in self.counters.items()}
        restarts = self.fleet.restarts
        out["rollout/replica_restarts"] = float(restarts - self._restarts_seen)
        self._restarts_seen = restarts
        out["timing_s/weight_write"], out["timing_s/weight_load"] = (
            self.sync_times["write_s"],
            self.sync_times["load_s"],
        )
        out["timing_s/weight_broadcast"] = self.sync_times["broadcast_s"]
        if self.fleet.router_counters is not None:  # the router retries a dead replica's requests by itself
            router = self.fleet.router_counters.take()
            out.update(router)
            out["rollout/retries"] += router.get("rollout/router_retries", 0.0)
        self.counters.update(dict.fromkeys(self.counters, 0))  # in place: the disk sync counts into it too
        self.sync_times = dict.fromkeys(self.sync_times, 0.0)
        return out

    def take_busy_intervals(self) -> list[tuple[float, float]]:
        """(start, end) of every request since the last call (the trainer unions them into rollout busy time)."""
        taken, self.busy_intervals = self.busy_intervals, []
        return taken

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.balancer is not None:
            await self.balancer.close()
            self.balancer = None
        if self.broadcast is not None:
            await asyncio.to_thread(self.broadcast.close)
        await self.fleet.close()
        self.files.close()
        self._started = False
