"""Server replicas placed on Ray nodes (`<section>.launch_on: ray`): one small Ray actor owns each replica's process.

    placed = RayReplicas(spec, section="rollout.server", ray_address=None)   # spec: a FleetSpec
    servers = placed.place(n, make_argv=lambda host, port: [...], envs=[{...}] * n)   # placement group ready
    # `servers` behave as ServerProcess: launch, wait_ready, alive, restart, kill, stop (ServerPool drives them)
    placed.close()                                     # replicas stopped, actors killed, placement group removed

One placement-group bundle per replica ({"CPU": threads, "GPU": gpus_per_replica, node_resource: 1}) with the
section's `placement` strategy, so Ray reserves every replica's node before any starts and a cluster without
room is one clear error. The actor (`ReplicaHost`) asks its own node for its IP and a free port there; the
replica binds that IP, and its URL (http://<node IP>:<port>) is what the router, the balancer and the weight
sync call. The actor starts the process in its own process group and stops it by pid; the process is also
told to die with the actor (Linux PR_SET_PDEATHSIG), so a killed actor or a lost driver leaves no server behind.
Ray is imported only here, inside functions.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from rlrm.errors import ConfigError, RolloutServerError
from rlrm.launch.common.ports import free_port
from rlrm.launch.common.ray_init import join_ray
from rlrm.launch.fleet.process import ServerProcess, ServerStartError, with_port
from rlrm.launch.fleet.ray_release import release_ray
from rlrm.launch.fleet.spec import FleetSpec

if TYPE_CHECKING:
    from ray.util.placement_group import PlacementGroup

# Resources Ray derives from placement groups: `<name>_group_<pg id>`, `<name>_group_<index>_<pg id>`.
_PLACEMENT_GROUP_RESOURCE = re.compile(r"_group_(\d+_)?[0-9a-f]{32,}$")


class ReplicaHost:
    """The body of one Ray actor: owns one server process on its node (`ray.remote` is applied at place time)."""

    def __init__(self):
        self.server: ServerProcess | None = None

    def where(self) -> tuple[str, str, int]:
        """(node id, node IP, a free port on that IP) of the node this actor runs on."""
        import ray

        ip = ray.util.get_node_ip_address()
        return ray.get_runtime_context().get_node_id(), ip, free_port(ip)

    def launch(self, argv: list[str], env: dict, host: str, argv_on: Callable[[int], list[str]] | None = None) -> None:
        """Launch the server; `argv_on` (its argv on another port) moves it to a fresh port of this node if another
        process takes its port while it starts (rlrm/launch/fleet/process.py); `address` then says where it is."""
        if self.server is None:
            self.server = ServerProcess(argv, host=host, env=env, die_with_parent=True, argv_on=argv_on)
        self.server.argv = list(argv)  # a restart may add flags (the policy's --wait-for-weights)
        self.server.launch()

    def address(self) -> tuple[int, list[str]]:
        """The port the server listens on and its argv (both changed if it moved while starting)."""
        server = self._launched()
        return server.port, list(server.argv)

    def wait_ready(self, timeout_s: float) -> None:
        server = self._launched()
        server.start_timeout_s = timeout_s
        server.wait_ready()

    def wait_listening(self, timeout_s: float) -> None:
        server = self._launched()
        server.start_timeout_s = timeout_s
        server.wait_listening()

    def _launched(self) -> ServerProcess:
        if self.server is None:
            raise ServerStartError("this replica's server is waited for but was never launched")
        return self.server

    def alive(self) -> bool:
        return self.server is not None and self.server.alive()

    def pid(self) -> int | None:
        proc = self.server.proc if self.server is not None else None
        return proc.pid if proc is not None and self.alive() else None

    def death(self) -> str:
        return self.server.death() if self.server is not None else "never launched"

    def reads(self, path: str, token: str) -> bool:
        """Whether this node sees the file `path` holding `token` (the trainer's weights folder is shared)."""
        try:
            return open(path).read() == token
        except OSError:
            return False

    def kill(self) -> None:
        if self.server is not None:
            self.server.kill()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


class RayReplica:
    """A replica on a Ray node: a `Replica` (rlrm/launch/fleet/pool.py), as a local ServerProcess is.

    A dead actor (its node lost) reads as a dead replica; relaunching it fails (the node is gone), so the
    supervisor keeps retrying while the balancer or router routes around it.
    """

    def __init__(
        self,
        actor,
        node_id: str,
        host: str,
        port: int,
        argv: list[str],
        env: dict,
        where: str,
        argv_on: Callable[[int], list[str]] | None = None,
    ):
        self.actor, self.node_id, self.host, self.port = actor, node_id, host, port
        self.argv, self.env, self.where = list(argv), env, where
        self.argv_on = argv_on  # its argv on another port of its node: see ReplicaHost.launch
        self.url = f"http://{host}:{port}"
        self.start_timeout_s = 120.0
        self._served = False

    def _call(self, method: str, *args, timeout_s: float | None = None):
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        try:
            return ray.get(getattr(self.actor, method).remote(*args), timeout=timeout_s)
        except RayTaskError as exc:
            cause = exc.cause if exc.cause is not None else exc
            raise ServerStartError(f"{self.where}: {str(cause).strip().splitlines()[0]}") from None
        except (RayActorError, GetTimeoutError) as exc:
            raise ServerStartError(
                f"{self.where}: its Ray actor is gone or does not answer ({type(exc).__name__})"
            ) from None

    def launch(self) -> None:
        self._call("launch", self.argv, self.env, self.host, None if self._served else self.argv_on)

    def wait_ready(self) -> None:
        self._call("wait_ready", self.start_timeout_s)
        self._take_address()

    def _take_address(self) -> None:
        if not self._served:  # it may have moved to a fresh port while starting: read it before anyone uses the URL
            port, self.argv = self._call("address", timeout_s=30.0)
            if port != self.port:  # said on the node too, where nobody reads it (log_to_driver is off)
                print(
                    f"rlrm: {self.where}: another process took port {self.port} before the server there bound it; "
                    f"it started on port {port}",
                    file=sys.stderr,
                    flush=True,
                )
            self.port, self.url = port, f"http://{self.host}:{port}"
            self._served = True

    def wait_listening(self) -> None:
        self._call("wait_listening", self.start_timeout_s)
        self._take_address()

    def start(self) -> RayReplica:
        self.launch()
        self.wait_ready()
        return self

    def restart(self) -> None:
        self.launch()
        self.wait_ready()

    def alive(self) -> bool:
        try:
            return bool(self._call("alive", timeout_s=30.0))
        except ServerStartError:
            return False

    def death(self) -> str:
        """One line for a replica found dead: its process's exit code and log tail, read on its node; or, when
        the actor itself is gone (its node lost), that."""
        try:
            return f"{self.where}: {self._call('death', timeout_s=30.0)}"
        except ServerStartError as exc:
            return f"{self.url} died: {exc}"

    def pid(self) -> int | None:
        """The server's pid on its node (None when it is not running)."""
        return self._call("pid", timeout_s=30.0)

    def reads(self, path: str, token: str) -> bool:
        return bool(self._call("reads", path, token, timeout_s=60.0))

    def kill(self) -> None:
        try:
            self._call("kill", timeout_s=30.0)
        except ServerStartError:
            pass  # the actor is gone, and its process with it

    def stop(self) -> None:
        try:
            self._call("stop", timeout_s=60.0)
        except ServerStartError:
            pass


def check_weights_reach(servers: list, folder) -> None:
    """Raise RolloutServerError unless every replica placed on Ray reads `folder`, where the trainer writes the
    policy's weights for `/update_weights_from_disk`: a probe file written here must be read there. On one machine
    (several Ray nodes on one host) it is; on another machine a node-local folder such as /dev/shm is not."""
    import uuid
    from pathlib import Path

    placed = [s for s in servers if isinstance(s, RayReplica)]
    if not placed:
        return
    token = uuid.uuid4().hex
    probe = Path(folder) / f".rlrm-reach-{token[:12]}"
    try:
        probe.parent.mkdir(parents=True, exist_ok=True)
        probe.write_text(token)
    except OSError as exc:
        raise RolloutServerError(
            f"cannot write to {folder} for the policy weights: {exc.strerror or exc}; set "
            "rollout.server.weights_dir to a writable folder"
        ) from None
    try:
        for server in placed:
            if not server.reads(str(probe), token):
                raise RolloutServerError(
                    f"{server.where} cannot read {folder}, where the trainer writes the policy weights for "
                    "/update_weights_from_disk (a node-local folder such as /dev/shm is not shared between machines); "
                    "set rollout.server.weights_dir to a folder on a filesystem every node mounts at the same path "
                    "(NFS, a shared disk)"
                )
    finally:
        probe.unlink(missing_ok=True)


class RayReplicas:
    """Places a fleet's replicas on Ray nodes (see the module docstring)."""

    def __init__(self, spec: FleetSpec, section: str, ray_address: str | None = None):
        self.spec, self.section, self.ray_address = spec, section, ray_address
        self.group: PlacementGroup | None = None
        self.actors: list = []
        self._started_ray = False

    def bundle(self) -> dict:
        """What Ray reserves for one replica."""
        c = self.spec
        bundle = {"CPU": float(max(c.threads, 1))}
        if c.gpus_per_replica:
            bundle["GPU"] = float(c.gpus_per_replica)
        if c.node_resource:
            bundle[c.node_resource] = 1.0
        return bundle

    def place(self, n: int, make_argv: Callable[[str, int], list[str]], envs: list[dict]) -> list[RayReplica]:
        """`n` replicas reserved and their actors started (nothing launched yet); undone on failure."""
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if join_ray(self.ray_address):
            self._started_ray = True
        try:
            bundle = self._check_resources(ray.cluster_resources())
            self.group = placement_group([bundle] * n, strategy=self.spec.placement)
            ready, _ = ray.wait([self.group.ready()], timeout=self.spec.start_timeout_s)
            if not ready:
                raise ConfigError(
                    f"Ray cannot place {n} {self.section} replicas of {bundle} with placement {self.spec.placement} within "
                    f"{self.spec.start_timeout_s:g} s (cluster resources: {ray.cluster_resources()}); add nodes or "
                    f"resources, lower {self.section}.replicas, or choose another {self.section}.placement"
                )
            remote = ray.remote(ReplicaHost)
            servers = []
            for i in range(n):
                strategy = PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=i)
                options = {"num_cpus": bundle["CPU"], "num_gpus": bundle.get("GPU", 0), "scheduling_strategy": strategy}
                if self.spec.node_resource:
                    options["resources"] = {self.spec.node_resource: 1.0}
                self.actors.append(remote.options(**options).remote())
            wheres = ray.get([a.where.remote() for a in self.actors], timeout=self.spec.start_timeout_s)
            for i, (actor, (node_id, ip, port)) in enumerate(zip(self.actors, wheres)):
                what = f"{self.section} replica {i} on node {ip} ({node_id[:12]})"
                argv = make_argv(ip, port)  # built here, once: a move on the node changes only its --port
                servers.append(RayReplica(actor, node_id, ip, port, argv, envs[i], what, partial(with_port, argv)))
            return servers
        except BaseException:
            self.close()
            raise

    def _check_resources(self, offered: dict) -> dict:
        bundle = self.bundle()
        name = self.spec.node_resource
        if name and name not in offered:
            labels = sorted(
                k
                for k in offered
                if k not in ("CPU", "GPU", "memory", "object_store_memory")
                and not k.startswith("node:__")
                and not k.startswith("accelerator_type")
                and not _PLACEMENT_GROUP_RESOURCE.search(k)
            )  # Ray's own, one per reserved bundle
            raise ConfigError(
                f"{self.section}.node_resource {name!r} is on no node of the Ray cluster (its nodes offer: "
                f"{', '.join(labels) or 'no custom resources'}); start the chosen nodes with "
                f"ray start --resources='{{\"{name}\": N}}' (N replicas each), or name one of those"
            )
        return bundle

    def close(self) -> None:
        release_ray(self.actors, self.group, shutdown=self._started_ray)  # replicas die with their actors
        self.actors, self.group, self._started_ray = [], None, False
