"""The replica contract of the fleet (`Replica`, rlrm/launch/fleet/pool.py): a local ServerProcess and a replica on a
Ray node offer every member, so the pool and its supervisor never ask which kind they hold, and a replica found dead
says why in one line whichever kind it is."""

from __future__ import annotations

import sys
import time

from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.pool import Replica
from rlrm.launch.fleet.process import ServerProcess
from rlrm.launch.fleet.ray_replicas import RayReplica, ReplicaHost

CRASH = "import sys; print('RuntimeError: the model does not fit', flush=True); sys.exit(3)"


def members(protocol: type) -> set[str]:
    """The names a Protocol declares: its methods and annotated attributes."""
    return {n for n in vars(protocol) if not n.startswith("_")} | set(protocol.__annotations__)


def test_both_replica_kinds_offer_the_whole_replica_contract():
    assert {"death", "alive", "launch", "wait_ready", "wait_listening", "restart", "kill", "stop"} <= members(Replica)
    local = ServerProcess([sys.executable, "-c", "pass", "--port", "1"])
    on_ray = RayReplica(None, "node", "10.0.0.2", 1, ["server", "--port", "1"], {}, "rollout.server replica 0")
    for replica in (local, on_ray):
        missing = sorted(n for n in members(Replica) if not hasattr(replica, n))
        assert missing == [], type(replica).__name__


def test_the_ray_actor_reports_its_process_death_as_a_local_replica_does():
    port = free_port()
    host = ReplicaHost()  # the body of the Ray actor, run here without Ray
    assert host.death() == "never launched"
    host.launch([sys.executable, "-c", CRASH, "--port", str(port)], env={}, host="127.0.0.1")
    deadline = time.monotonic() + 20
    while host.alive():
        assert time.monotonic() < deadline, "the crashing process did not exit"
        time.sleep(0.05)
    death = host.death()
    assert death.startswith(f"http://127.0.0.1:{port} died (exit code 3): RuntimeError: the model does not fit"), death


def test_a_replica_whose_ray_actor_is_gone_says_so_in_its_death_line():
    from ray.exceptions import RayActorError

    class GoneActor:  # what a handle to an actor on a lost node does: every call fails with RayActorError
        def __getattr__(self, method):
            def remote(*args):
                raise RayActorError()

            return type("Method", (), {"remote": staticmethod(remote)})

    replica = RayReplica(GoneActor(), "node", "10.0.0.2", 8000, [], {}, "rollout.server replica 0 on node 10.0.0.2")
    assert replica.alive() is False
    assert replica.death() == (
        "http://10.0.0.2:8000 died: rollout.server replica 0 on node 10.0.0.2: its Ray actor is gone or does not "
        "answer (RayActorError)"
    )
