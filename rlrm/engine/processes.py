"""The processes a run would start (rollout servers, reward servers, routers), for `rlrm train --dry-run`.

    for line in planned_processes(profile): print(line)
    # rollout.server replica 0: /usr/bin/python -m rlrm.launch.server --model tiny:policy --role policy ...

Ports are illustrative (8000 + i for the first fleet's replicas, 8100 + i for the next; 30000/30001,
30010/30011 for routers): a real run takes free
ones. `tiny:NAME` models are shown as named; the run resolves them to their prepared folders.
"""

from __future__ import annotations

import shlex

from rlrm.config.schema import Profile
from rlrm.engine.served import fleet_spec, ray_address
from rlrm.launch.fleet.engine_argv import engine_device, engine_env
from rlrm.launch.fleet.server_fleet import ServerFleet


def planned_processes(profile: Profile) -> list[str]:
    """One `# <section> <what>: <argv>` line per process, as YAML comments."""
    fleets = []
    if profile.rollout.backend == "server":
        fleets.append(
            ServerFleet(
                fleet_spec(profile), role="policy", model_path=profile.model.path, ray_address=ray_address(profile)
            )
        )
    reward = profile.reward
    if reward.model_kind and not (reward.model_kind == "disrm" and reward.disrm.scorer == "legacy"):
        fleets.append(
            ServerFleet(
                reward.server.fleet_spec(),
                role=reward.model_kind,
                model_path=reward.server.model or "",
                ray_address=reward.ray_address,
            )
        )
    lines = []
    for k, fleet in enumerate(fleets):
        if fleet.on_ray:  # local replicas go on this node, as they always did
            n = fleet.spec.replicas
            lines.append(f"# {fleet.section}: {n} replica{'s' * (n > 1)} on {fleet.where()}")
        argvs = fleet.argvs(base_port=8000 + 100 * k, router_port=30000 + 10 * k)
        launched = 0 if fleet.spec.addresses else fleet.spec.replicas
        for i, argv in enumerate(argvs):
            what = f"replica {i}" if i < launched else "router"
            env = _env(fleet, i) if i < launched else ""
            lines.append(f"# {fleet.section} {what}: {env}{shlex.join(argv)}")
        if fleet.spec.addresses:
            lines.append(f"# {fleet.section}: running servers {', '.join(fleet.spec.addresses)} (nothing launched)")
    return lines


def _env(fleet: ServerFleet, i: int) -> str:
    env = dict(engine_env(fleet.spec.backend, None, fleet.role, engine_device(fleet.spec.gpu_ids)))
    if fleet.spec.gpu_ids:
        env["CUDA_VISIBLE_DEVICES"] = str(fleet.spec.gpu_ids[i % len(fleet.spec.gpu_ids)])
    return "".join(f"{k}={shlex.quote(v)} " for k, v in env.items())
