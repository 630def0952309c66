"""Reward-loop workers as Ray actors, spread round-robin over the cluster's nodes.

    workers = RayRewardWorkers(profile.reward, urls=balancer.urls, model_path=path)
    workers.start()                       # joins reward.ray_address, or starts a local Ray
    loop = RewardLoop(workers.score, profile.reward)
    ...
    workers.close()

Each actor is pinned to a node that is alive at start (hard node affinity: soft affinity left both
actors of a fresh two-node cluster on one node in 2 runs of 5 here). A sample whose worker is gone
moves to the next worker. Each actor builds its own reward function (and balancer over the same
servers) and scores the samples sent to it on its own event loop. Failures come back as data and are raised again here
with their original kind, so the reward loop's retry and failure policy treats them exactly as it
treats local ones, and names them alike: `workers.score` bears the workers' function's name, and a user function's
error is raised under its own class name. An attempt the loop gives up (reward.attempt_timeout_s) is cancelled in
its actor too, so a custom function's worker process is killed there, as on the local path; the model calls it made
until then are taken from the actor (`take_cut_off`) and counted here, as the local path counts them. With
`reward.limits`, one RateLimiter actor holds the run's budget and every worker asks it before each reward-model
request, so N workers send the limit, not N times it.
"""

from __future__ import annotations

import asyncio
import uuid

from rlrm import call_errors
from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards import errors as reward_specific
from rlrm.engine.rewards.base import ClosableRewardFn, RewardFn, RewardResult, RewardSample
from rlrm.engine.rewards.factory import build_reward_fn
from rlrm.engine.rewards.ledger import CallLedger, current_ledger, ledger_scope
from rlrm.engine.rewards.limits import RateLimiter, paced
from rlrm.engine.rewards.threads import FunctionExited
from rlrm.launch.client.balancer import ReplicaBalancer
from rlrm.launch.common.ray_init import join_ray
from rlrm.launch.fleet.ray_release import release_ray

_ERRORS = {
    cls.__name__: cls
    for cls in (
        call_errors.CallError,
        call_errors.TransientError,
        call_errors.RequestTimeout,
        call_errors.BadRequest,
        reward_specific.UnparsedVerdict,
        reward_specific.NonFiniteScore,
        reward_specific.InjectedFailure,
        call_errors.Throttled,
    )
}
CUT_OFF_KEPT = 1024  # an actor keeps at most this many cut-off attempts' counts the driver has not taken yet
TAKE_TIMEOUT_S = 1.0  # how long the driver waits for a cut-off attempt's counts: a hung worker holds it no longer


class RemoteLimiter:
    """The run's RateLimiter actor, asked as a local RateLimiter is (rlrm/engine/rewards/limits.py)."""

    def __init__(self, actor):
        self.actor = actor
        self._giving_back: set[asyncio.Task] = set()  # held here: a task nobody references may be collected

    async def reserve(self, tokens: int) -> float:
        taken = asyncio.ensure_future(self.actor.reserve.remote(tokens))
        try:
            return await asyncio.shield(taken)
        except asyncio.CancelledError:  # the sample's deadline: the actor's call goes on all the same, and takes a slot
            task = asyncio.ensure_future(self._give_back_once_taken(taken, tokens))
            self._giving_back.add(task)
            task.add_done_callback(self._giving_back.discard)
            raise

    async def _give_back_once_taken(self, taken: asyncio.Future, tokens: int) -> None:
        try:
            await taken
        except Exception:  # noqa: BLE001 - the actor failed or is gone: it took nothing
            return
        await self.release(tokens, 0)  # nothing was sent

    async def acquire(self, tokens: int) -> float:
        return await paced(self, tokens)  # the slot is kept here, in the worker: a late answer does not move it

    async def release(self, estimated: int, used: int) -> None:
        await self.actor.release.remote(estimated, used)

    async def pause(self, seconds: float) -> None:
        await self.actor.pause.remote(seconds)

    async def paused_until(self) -> float:
        return await self.actor.paused_until.remote()


class RewardWorker:
    """The body of one Ray actor (plain class: `ray.remote` is applied at start time)."""

    def __init__(
        self, cfg: dict, urls: list[str], model_path: str | None, api_key: str | None = None, limiter=None, headers=None
    ):
        self.cfg, self.urls, self.model_path = RewardConfig.model_validate(cfg), urls, model_path
        self.api_key = api_key  # read by the driver from reward.server.api_key_env: a remote node may not have it
        self.headers = headers  # reward.server.headers_env's values, read by the driver for the same reason
        self.limiter = RemoteLimiter(limiter) if limiter is not None else None  # the run's one budget
        self.fn: ClosableRewardFn | None = None
        self._running: dict[str, CallLedger] = {}  # request id -> the ledger of an attempt being scored
        self._cut_off: dict[str, dict] = {}  # request id -> the counts of an attempt cancelled by the driver

    def _function(self) -> ClosableRewardFn:
        if self.fn is None:  # built lazily, inside the actor's own event loop
            balancer = ReplicaBalancer(self.urls, api_key=self.api_key, headers=self.headers) if self.urls else None
            self.fn = build_reward_fn(self.cfg, balancer, self.model_path, self.limiter)
        return self.fn

    async def name(self) -> str | None:
        """The reward function's name (None when it cannot be built: each sample then reports why)."""
        try:
            return getattr(self._function(), "__name__", None)  # the loop names a function alike
        except Exception:  # noqa: BLE001 - raised again, as a failed sample, by score
            return None

    async def score(self, sample: RewardSample, request_id: str | None = None):
        """The sample's outcome (see `_score`). Its model calls land in a ledger kept under `request_id` while it
        runs, and after, where the driver cancelled it (its timeout): the driver then takes the counts."""
        if request_id is None:
            return await self._score(sample)
        with ledger_scope() as ledger:  # the function's own scope (factory.with_ledger) reuses this one
            self._running[request_id] = ledger
            try:
                return await self._score(sample)
            except asyncio.CancelledError:
                self._keep_cut_off(request_id)
                raise
            finally:
                cancelling = getattr(asyncio.current_task(), "cancelling", None)  # Python 3.11+
                if cancelling is not None and cancelling():  # cancelled, though the function made it an outcome
                    self._keep_cut_off(request_id)
                self._running.pop(request_id, None)

    def _keep_cut_off(self, request_id: str) -> None:
        ledger = self._running.pop(request_id, None)  # gone: the driver took its counts already
        counts = ledger.as_extra() if ledger is not None else {}
        if not counts:
            return
        while len(self._cut_off) >= CUT_OFF_KEPT:  # the oldest, whose driver never came for them, go first
            del self._cut_off[next(iter(self._cut_off))]
        self._cut_off[request_id] = counts

    async def take_cut_off(self, request_id: str) -> dict:
        """The counts (ledger `as_extra()`) of the cancelled attempt `request_id`, once: {} when it made no call.
        Asked right after `ray.cancel`, it may arrive before the cancellation: the counts so far, then."""
        if request_id in self._cut_off:
            return self._cut_off.pop(request_id)
        ledger = self._running.pop(request_id, None)
        return ledger.as_extra() if ledger is not None else {}

    async def _score(self, sample: RewardSample):
        try:
            return "ok", await self._function()(sample)
        except call_errors.CallError as exc:
            return "error", type(exc).__name__, str(exc), exc.extra  # the counts of a failed sample's calls too
        except (FunctionExited, SystemExit) as exc:  # sys.exit() in a user's function: its code, as locally
            return "exit", exc.code
        except Exception as exc:  # noqa: BLE001 - a user function's own error, reported by name
            return "raised", type(exc).__name__, str(exc), {}

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


class RaisedInWorker(Exception):
    """A user function's error in a Ray worker, raised here under a class of the original's name (see `raised`)."""


_RAISED: dict[str, type[RaisedInWorker]] = {}


def raised(name: str, message: str) -> RaisedInWorker:
    """An exception whose class is named `name` and whose text is `message`: the reward loop names a function's
    error by its class name (`compute_score raised ValueError: boom`), and the original class may not exist here."""
    if name not in _RAISED:
        _RAISED[name] = type(name, (RaisedInWorker,), {"__module__": __name__})
    return _RAISED[name](message)


def named(fn: RewardFn, name: str) -> RewardFn:
    """`fn` under the name the reward loop gives its failures (a bound method's own name cannot be set)."""

    async def call(sample: RewardSample):
        return await fn(sample)

    call.__name__ = call.__qualname__ = name
    return call


class RayRewardWorkers:
    """`reward.num_workers` RewardWorker actors; `score` is the reward function a RewardLoop is given."""

    def __init__(
        self,
        cfg: RewardConfig,
        urls: list[str],
        model_path: str | None,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        self.cfg, self.urls, self.model_path, self.api_key = cfg, list(urls), model_path, api_key
        self.headers = headers
        self.actors: list = []
        self.limiter = None  # the RateLimiter actor, with reward.limits
        self._joined_ray = False
        self.score: RewardFn = self._score  # named as the workers' function once they start

    def start(self) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._joined_ray = join_ray(self.cfg.ray_address)
        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        # ray's remote() overloads omit the actor option max_concurrency, which Ray takes
        actor_cls = ray.remote(num_cpus=0, max_concurrency=self.cfg.max_concurrency)(RewardWorker)  # type: ignore[call-overload]
        cfg = self.cfg.model_dump(mode="json")
        limits = self.cfg.limits
        if limits.active:  # one budget for the whole run, asked by every worker before each request
            self.limiter = ray.remote(num_cpus=0, max_concurrency=1000)(RateLimiter).remote(  # type: ignore[call-overload]
                limits.max_concurrent, limits.rpm, limits.tpm
            )
        for i in range(self.cfg.num_workers):
            strategy = NodeAffinitySchedulingStrategy(node_id=nodes[i % len(nodes)], soft=False)
            self.actors.append(
                actor_cls.options(scheduling_strategy=strategy).remote(
                    cfg, self.urls, self.model_path, self.api_key, self.limiter, self.headers
                )
            )
        # the loop names every failure by its function's name: the one the workers built, as the local path does
        self.score = named(self._score, ray.get(self.actors[0].name.remote()) or "reward")

    async def _score(self, sample: RewardSample) -> RewardResult:
        """Score on the actor that owns this sample's index (the next one if it died); failures raised with their kind."""
        from ray.exceptions import RayActorError

        for shift in range(len(self.actors)):
            try:
                outcome = await self._ask(self.actors[(sample.index + shift) % len(self.actors)], sample)
                break
            except RayActorError:
                continue
        else:
            raise call_errors.TransientError("every Ray reward worker is gone")
        if outcome[0] == "ok":
            return outcome[1]
        if outcome[0] == "exit":
            raise FunctionExited(outcome[1])
        _, name, message, extra = outcome
        if outcome[0] == "error":
            error = _ERRORS.get(name, call_errors.CallError)(message)
            error.extra = extra
            raise error
        raise raised(name, message)

    @staticmethod
    async def _ask(actor, sample: RewardSample):
        import ray

        request_id = uuid.uuid4().hex
        ref = actor.score.remote(sample, request_id)
        try:
            return await ref
        except asyncio.CancelledError:
            # the loop gave the attempt up (reward.attempt_timeout_s); the actor's task goes on unless cancelled
            # there too, where a custom function's worker process is killed as on the local path
            ray.cancel(ref)
            await RayRewardWorkers._take_cut_off(actor, request_id)
            raise

    @staticmethod
    async def _take_cut_off(actor, request_id: str) -> None:
        """Count a cancelled attempt's model calls in the attempt's ledger here, as the local path counts them:
        they were made in the actor, whose answer the cancel dropped. Bounded: a gone or hung actor loses them."""
        try:
            counts = await asyncio.wait_for(
                asyncio.ensure_future(actor.take_cut_off.remote(request_id)), TAKE_TIMEOUT_S
            )
        except Exception:  # noqa: BLE001 - timed out, or the actor is gone: the calls go uncounted
            return
        current_ledger().merge(counts)

    def node_ids(self) -> list[str]:
        import ray

        return ray.get([a.node_id.remote() for a in self.actors])

    def close(self) -> None:
        limiter: list = [self.limiter] if self.limiter is not None else []
        release_ray(self.actors + limiter, None, shutdown=self._joined_ray)  # other parts may still use Ray
        self.actors, self.limiter, self._joined_ray = [], None, False
