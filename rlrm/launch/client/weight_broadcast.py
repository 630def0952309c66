"""The trainer's side of `rollout.server.weight_sync: distributed`: one process group with the replicas, weights broadcast.

    sync = WeightBroadcast(SGLangWire(), backend="gloo", timeout_s=300)
    failures, error = sync.open(replica_urls)        # every replica POSTed /init_weights_update_group while rank 0 joins
    failures, error = sync.send(state_dict, version)  # POST /update_weights_from_distributed to all, then broadcast
    sync.close()                                      # /destroy_weights_update_group on every member, group left

    fleet_sync = FleetBroadcast(fleet, sync)          # what ServerRolloutEngine uses: over a fleet's replicas
    fleet_sync.open(); skipped = fleet_sync.send(state_dict, version)   # rebuilt when members change

The trainer is rank 0 and each replica i of `members` joins as rank 1 + i (an embedded or SGLang
server with one rank; SGLang adds its tensor-parallel rank to the offset). SGLang's calls block
until the collective is done, so they are made from threads while this thread takes part in it:
joining, then broadcasting every tensor in the order of `names`. Calls return `{url: why}` for the
members that failed (empty when all succeeded) and the trainer's own error, if any; the rollout
engine (rlrm/launch/client/rollout_engine.py) decides what a failure means (a dead replica is skipped and
the group rebuilt without it; a refusal fails the step: `FleetBroadcast`). The master address is 127.0.0.1 when
every replica is on this machine, else this machine's address on the route to them.
"""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from rlrm.call_errors import TransientError
from rlrm.errors import RolloutServerError
from rlrm.inference.weight_files import ServingCast
from rlrm.launch.client.wire import post_sync_call
from rlrm.launch.common.model_info import gpu_uuid
from rlrm.launch.common.weight_group import (
    GROUP,
    WeightGroup,
    dtype_name,
    host_store,
    is_loopback,
    join_group,
    local_ip_towards,
)

DESTROY_TIMEOUT_S = 10.0


def master_address(urls: list[str]) -> str:
    """Where the replicas at `urls` reach the trainer: loopback when all are local, else the route's address."""
    remote = [h for h in (urlsplit(u).hostname or "127.0.0.1" for u in urls) if not is_loopback(h)]
    return local_ip_towards(remote[0]) if remote else "127.0.0.1"


def gpus_shared(members: dict[str, str | None]) -> tuple[str, str] | None:
    """The first two of `members` ({name: GPU UUID, None where not on a GPU}) on one GPU, or None."""
    first: dict[str, str] = {}
    for name, gpu in members.items():
        if gpu is None:
            continue
        if gpu in first:
            return first[gpu], name
        first[gpu] = name
    return None


def trainer_device(policy_device: str | None = None) -> str | None:
    """The CUDA device the trainer's side of an NCCL weight-update group uses: the policy's GPU (`policy_device`,
    cuda:N, so that the weights need no copy to another GPU and the GPU compared is the one they are on), else this
    thread's current one (a policy on the CPU, or one not given); fixed before the group is joined from a worker
    thread; None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    kind, _, index = (policy_device or "").partition(":")
    if kind == "cuda" and index:
        return policy_device
    return f"cuda:{torch.cuda.current_device()}"


class WeightBroadcast:
    """The group between the trainer and `members`; see the module docstring.

    Args:
        wire: SGLang's request shapes (rlrm/launch/client/wire.py `SGLangWire`).
        backend: gloo or nccl.
        timeout_s: bound on joining and on each broadcast (the HTTP calls get a little more).
        api_key: the replicas' bearer key, or None.
        policy_device: the trainer's policy's device; nccl joins on it when it is a GPU (`trainer_device`).
    """

    def __init__(
        self, wire, backend: str, timeout_s: float, api_key: str | None = None, policy_device: str | None = None
    ):
        self.wire, self.backend, self.timeout_s, self.api_key = wire, backend, timeout_s, api_key
        self.policy_device = policy_device  # where the trainer's weights are (cpu, cuda, cuda:N), if known
        self.device: str | None = None  # nccl: the trainer's CUDA device (None: the joining thread's current one)
        self.group: WeightGroup | None = None
        self.members: list[str] = []

    def open(self, members: list[str]) -> tuple[dict[str, str], str | None]:
        """A new group of the trainer and `members` (the old one destroyed first)."""
        self.close()
        if not members:
            return {}, None
        master = master_address(members)
        world = 1 + len(members)
        try:
            store = host_store(master, world, self.timeout_s)  # its port is the group's from now on
        except (RolloutServerError, RuntimeError) as exc:  # a master that does not resolve; torch's own errors
            return {}, f"{type(exc).__name__}: {exc}"
        port = store.port
        calls = {
            u: self.wire.init_group(master, port, 1 + i, world, self.backend, GROUP) for i, u in enumerate(members)
        }

        def join() -> None:
            self.group = join_group(
                master, port, 0, world, GROUP, self.backend, self.timeout_s, device=self.device, store=store
            )

        failures, error = self._during_calls(calls, join)
        if failures or error:
            self.close(members)
        else:
            self.members = list(members)
        return failures, error

    def keep_gpus_apart(self, replica_gpus: dict[str, str | None], chosen: bool) -> None:
        """An NCCL group with two members on one GPU fails to form ("Duplicate GPU detected"): a replica on the
        trainer's GPU (one GPU for both, or `gpu_ids` naming the trainer's), or two replicas given one
        (`replica_gpus`: each replica's GPU UUID from /get_model_info, None where it is not on one). Where `auto`
        chose nccl (`chosen`), the weights go over gloo instead (through the CPU), said in one line; where nccl
        was named, one line says what to change."""
        if self.backend != "nccl":
            return
        self.device = trainer_device(
            self.policy_device
        )  # the GPU compared here is the one the group is joined on, from any thread
        trainer = gpu_uuid(self.device) if self.device is not None else None
        clash = gpus_shared({"the trainer": trainer, **{f"replica {u}": g for u, g in replica_gpus.items()}})
        if clash is None:
            return
        what = f"{clash[0]} and {clash[1]} are on one GPU, and NCCL refuses two members of a group on one GPU"
        if not chosen:
            raise RolloutServerError(
                f"rollout.server.weight_sync_backend=nccl: {what}: give each replica a GPU of its own "
                "(rollout.server.gpu_ids) or set rollout.server.weight_sync_backend=gloo"
            )
        print(
            f"warning: rollout.server: {what}: the weights are broadcast over gloo (through CPU copies) instead",
            file=sys.stderr,
            flush=True,
        )
        self.backend = "gloo"

    def send(
        self, state_dict: dict, version: int, cast: ServingCast = ServingCast()
    ) -> tuple[dict[str, str], str | None]:
        """Every tensor of `state_dict` to every member, as weights version `version`, each as `cast` says (cast
        one at a time, as it is sent)."""
        if self.group is None:  # no member left (every replica down): nothing to send to
            return {}, None
        device = self.group.device
        state_dict = cast.names(state_dict)
        names = list(state_dict)
        call = self.wire.update_distributed(
            names,
            [dtype_name(cast.target(n, v)) for n, v in state_dict.items()],
            [list(v.shape) for v in state_dict.values()],
            version,
            GROUP,
        )

        group = self.group

        def broadcast() -> None:
            for name, value in state_dict.items():
                t = cast(name, value.detach())  # where it lies: half the bytes to move for a bf16 replica
                group.broadcast((t if t.device == device else t.to(device)).contiguous())
            group.synchronize()

        return self._during_calls(dict.fromkeys(self.members, call), broadcast)

    def close(self, members: list[str] | None = None) -> None:
        """Destroy the group on its members (best effort: a dead one answers nothing) and leave it."""
        members = self.members if members is None else members
        self.members = []
        if members:
            path, body = self.wire.destroy_group(GROUP)
            with ThreadPoolExecutor(max_workers=len(members)) as pool:
                list(pool.map(lambda u: self._post(u, path, body, DESTROY_TIMEOUT_S), members))
        self._leave()

    def _leave(self) -> None:
        group, self.group = self.group, None
        if group is not None:
            group.close()

    def _during_calls(self, calls: dict[str, tuple[str, dict]], work) -> tuple[dict[str, str], str | None]:
        """POST every call from a thread while `work()` runs here; ({url: why}, the trainer's own error or None)."""
        error = None
        with ThreadPoolExecutor(max_workers=len(calls)) as pool:
            futures = {
                u: pool.submit(self._post, u, path, body, self.timeout_s + 30.0) for u, (path, body) in calls.items()
            }
            try:
                work()
            except Exception as exc:  # noqa: BLE001 - gloo/nccl raise RuntimeError subclasses, TCPStore TimeoutError
                error = f"{type(exc).__name__}: {exc}"
                self._leave()  # members still waiting on the collective fail now instead of at the timeout
            failures = {u: f.result() for u, f in futures.items()}
        return {u: why for u, why in failures.items() if why}, error

    def _post(self, url: str, path: str, body: dict, timeout_s: float) -> str | None:
        try:
            return post_sync_call(url, path, body, self.wire, self.api_key, timeout_s)
        except TransientError as exc:  # names the call and what failed (a timeout says so)
            return str(exc)


class FleetBroadcast:
    """Distributed weight sync over a fleet's replicas: who takes part, when the group is rebuilt, who waits.

    Args:
        fleet: the policy fleet (rlrm/launch/fleet/server_fleet.py), started.
        group: the WeightBroadcast doing the calls and the collective.
    """

    def __init__(self, fleet, group: WeightBroadcast):
        self.fleet, self.group = fleet, group
        self.awaiting: set[str] = set()  # restarted replicas waiting (503) for the next broadcast
        # restarted replicas a broadcast reached, before the supervisor marks them done: {url: fleet restarts then}
        self.loaded: dict[str, int] = {}
        self._restarts = 0  # the fleet's restarts when the group was built: a restarted member has left it

    def open(self) -> None:
        """The group with every replica, at start: one that cannot join is named (RolloutServerError)."""
        self._restarts = self.fleet.restarts
        failures, error = self.group.open(list(self.fleet.replica_urls))
        if failures or error:
            url, why = next(iter(failures.items())) if failures else ("(the trainer)", error)
            raise RolloutServerError(f"rollout replica {url} could not join the weight-update group: {why}")

    def send(self, state_dict: dict, version: int, cast: ServingCast = ServingCast()) -> int:
        """Broadcast `version` to every live replica and every restarted one waiting (each tensor as `cast` says);
        returns how many were skipped.

        The group is rebuilt first when its members changed; a member that died during the broadcast
        is left out and the version sent again to the others (each replica puts a version in place
        only once it received all of it).

        Raises:
            RolloutServerError: a live replica refused the weights (named, with its reason), or the
                collective failed with no member dead.
        """
        urls = list(self.fleet.replica_urls)
        for _ in range(len(urls) + 1):
            members = [u for u in urls if u in self.awaiting or not self._down(u)]
            failures: dict[str, str] = {}
            error: str | None = None
            if members != self.group.members or self.fleet.restarts != self._restarts:
                self._restarts = self.fleet.restarts
                failures, error = self.group.open(members)
            if not failures and error is None:
                failures, error = self.group.send(state_dict, version, cast)
            if not failures and error is None:
                for url in self.awaiting.intersection(
                    members
                ):  # members from now on, while the supervisor checks health
                    self.loaded[url] = self.fleet.restarts
                self.awaiting.difference_update(members)  # their restart hooks return: they serve `version`
                return len(urls) - len(members)
            if any(self._gone(u) for u in members):  # a member died meanwhile: again without it
                self.group.close()
                continue
            url, why = next(iter(failures.items())) if failures else ("(the trainer)", error)
            raise RolloutServerError(f"rollout replica {url} refused weights version {version}: {why}")
        raise RolloutServerError(
            f"weights version {version} reached no stable set of rollout replicas: they keep dying"
        )

    async def await_broadcast(self, url: str) -> None:
        """The restart hook: hold a restarted replica (503 while it waits for weights) until a broadcast reached it.

        Raises:
            RolloutServerError: it died meanwhile (the supervisor kills and restarts it again).
        """
        self.loaded.pop(url, None)
        self.awaiting.add(url)
        try:
            while url in self.awaiting:
                if not await asyncio.to_thread(self._alive, url):
                    raise RolloutServerError(f"restarted rollout replica {url} died while waiting for weights")
                await asyncio.sleep(0.2)
        finally:
            self.awaiting.discard(url)

    def close(self) -> None:
        self.group.close()

    def _alive(self, url: str) -> bool:
        pool = self.fleet.pool
        return pool is None or pool.alive(url)

    def _down(self, url: str) -> bool:
        """Dead or being restarted (launched replicas only; running `addresses` are never left out)."""
        pool = self.fleet.pool
        if pool is None:
            return False
        if url in pool.restarting and self.loaded.get(url) != self.fleet.restarts:
            return True  # launching, or waiting: not a member unless it waits for this broadcast
        return not self._alive(url)

    def _gone(self, url: str) -> bool:
        """A member that cannot take part: its process died, or it restarts without waiting for a broadcast."""
        return self._down(url) and (url not in self.awaiting or not self._alive(url))
