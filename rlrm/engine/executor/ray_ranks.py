"""Training ranks as Ray actors in a placement group: one bundle per rank, across the cluster's nodes.

    ranks = RayRanks(spec, address=None)     # joins `address`, the Ray already initialised, or a local one
    ranks.start()                            # placement group (actor.placement), rendezvous, models sharded
    outs = ranks.call("train", [(shard_0, sizes), (shard_1, sizes)])
    ranks.close()

Each rank is the worker its spec names (`spec.worker_class()`, the actor's `RankWorker`) in its own Ray actor, reserved one bundle of
a placement group: {"CPU": 1} per rank on CPU, {"CPU": 1, "GPU": 1} on GPU (Ray sets the visible
device, so every rank uses its cuda:0). The strategy is `actor.placement`: PACK fills as few nodes as
possible (an 8-GPU node takes 8 ranks), SPREAD and STRICT_SPREAD put ranks on different nodes,
STRICT_PACK all on one. Rank 0 picks the rendezvous address (its node's IP, a free port there).
Same calls and failure semantics as `rank_procs.RankProcesses`: a dead actor (node lost, kill -9)
fails the call with a RankError naming the rank and its node, and the group serves no more calls.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from rlrm.engine.executor.rank_procs import RankError, dead_rank_line, raise_rank_error
from rlrm.launch.common.ray_init import join_ray
from rlrm.launch.fleet.ray_release import release_ray

if TYPE_CHECKING:
    from ray.util.placement_group import PlacementGroup


class RayRanks:
    """`spec.world_size` ranks as Ray actors (see the module docstring)."""

    def __init__(self, spec, address: str | None = None):
        self.spec, self.address = spec, address
        self.world_size = spec.world_size
        self.nodes: list[str] = ["?"] * spec.world_size
        self.actors: list = []
        self.group: PlacementGroup | None = None
        self.broken: str | None = None
        self._lock = threading.Lock()
        self._started_ray = False

    def start(self) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        cfg = self.spec.profile.actor
        if join_ray(self.address):
            self._started_ray = True
        gpu = self.spec.device == "cuda"
        bundle = {"CPU": 1, "GPU": 1} if gpu else {"CPU": 1}
        try:
            self.group = placement_group([bundle] * self.world_size, strategy=cfg.placement)
            ready, _ = ray.wait([self.group.ready()], timeout=cfg.collective_timeout_s)
            if not ready:
                raise RankError(
                    f"Ray cannot place {self.world_size} actor ranks of {bundle} with placement {cfg.placement} "
                    f"within {cfg.collective_timeout_s:g} s (cluster resources: {ray.cluster_resources()}); add nodes, "
                    "lower actor.world_size, or choose another actor.placement"
                )
            remote = ray.remote(self.spec.worker_class())
            for rank in range(self.world_size):
                strategy = PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=rank)
                options: dict[str, Any] = {"num_cpus": 1, "num_gpus": 1 if gpu else 0, "scheduling_strategy": strategy}
                if not gpu:  # the rank's torch threads: one per reserved CPU
                    options["runtime_env"] = {"env_vars": {"OMP_NUM_THREADS": "1"}}
                self.actors.append(remote.options(**options).remote(self.spec))
            master, port = self._get([self.actors[0].address.remote()], "address", ranks=[0])[0]
            self.nodes = self._get([a.setup.remote(r, 0, master, port) for r, a in enumerate(self.actors)], "setup")
        except BaseException:
            self.close()
            raise

    def call(self, method: str, args: list[tuple]) -> list:
        """Run `method(*args[r])` on every rank r; their results in rank order."""
        with self._lock:  # one call at a time: every rank must see the calls in the same order
            if self.broken:
                raise RankError(f"the actor ranks stopped after an earlier failure ({self.broken})")
            refs = [getattr(a, method).remote(*rank_args) for a, rank_args in zip(self.actors, args)]
            return self._get(refs, method)

    def call_all(self, method: str, *args) -> list:
        return self.call(method, [args] * self.world_size)

    def _get(self, refs: list, method: str, ranks: list[int] | None = None) -> list:
        """Every result; the first failure (a dead actor before a survivor's broken collective) raised."""
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        ranks = ranks if ranks is not None else list(range(len(refs)))
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=1.0)
            for ref in done:
                try:
                    ray.get(ref)
                except RayActorError:
                    self._raise_dead(ranks[refs.index(ref)], method)
                except RayTaskError as exc:
                    time.sleep(1.0)  # a peer's death breaks the survivors' collectives: name the dead one first
                    for rank, other in zip(ranks, refs):
                        if other is not ref and _dead(other):
                            self._raise_dead(rank, method)
                    rank = ranks[refs.index(ref)]
                    self.broken = f"rank {rank} failed in {method}"
                    cause = exc.cause if exc.cause is not None else exc
                    raise_rank_error(
                        rank, self.nodes[rank], method, type(cause).__name__, str(cause).strip().splitlines()[0]
                    )
        return ray.get(refs)

    def _raise_dead(self, rank: int, method: str) -> None:
        self.broken = f"rank {rank} on node {self.nodes[rank]} died (its Ray actor is gone)"
        raise RankError(dead_rank_line(self.broken, method))

    def close(self) -> None:
        release_ray(self.actors, self.group, shutdown=self._started_ray)
        self.actors, self.group, self._started_ray = [], None, False


def _dead(ref) -> bool:
    """Whether `ref` failed because its actor died (False while it is still running)."""
    import ray
    from ray.exceptions import RayActorError

    done, _ = ray.wait([ref], timeout=0)
    if not done:
        return False
    try:
        ray.get(ref)
    except RayActorError:
        return True
    except Exception:  # noqa: BLE001 - another failure: not a death
        return False
    return False
