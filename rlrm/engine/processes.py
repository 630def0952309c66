"""The processes a run would start (rollout servers, reward servers, routers), for `rlrm train --dry-run`.

    for line in planned_processes(profile): print(line)
    # rollout.server replica 0: /usr/bin/python -m rlrm.launch.server --model tiny:policy --role policy ...

Ports are illustrative (8000 + i for the first fleet's replicas, 8100 + i for the next; 30000/30001,
30010/30011 for routers): a real run takes free ones. `tiny:NAME` models are shown as named; the run resolves
them to their prepared folders. The run's own key of launched servers is shown as `<run key>` (a real run makes
a fresh one and puts it only in their environment), the run's weights folder as `rlrm-weights-<pid>-<id>`.
Nothing is created, read or swept: this only prints.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from rlrm.config.schema import Profile
from rlrm.engine.served import fleet_spec, ray_address
from rlrm.inference.weight_files import default_weights_dir
from rlrm.launch.common.roles import Role
from rlrm.launch.fleet.backends import backend_for
from rlrm.launch.fleet.server_fleet import ServerFleet


def planned_processes(profile: Profile) -> list[str]:
    """One `# <section> <what>: <argv>` line per process, as YAML comments."""
    fleets = []
    if profile.rollout.backend == "server":
        fleets.append(
            ServerFleet(
                fleet_spec(profile),
                role=Role.POLICY,
                model_path=profile.model.path,
                api_key=_key_shown(fleet_spec(profile), profile.rollout.server.api_key_env),
                ray_address=ray_address(profile),
            )
        )
    reward = profile.reward
    if reward.model_kind and not (reward.model_kind == "disrm" and reward.disrm.scorer == "legacy"):
        fleets.append(
            ServerFleet(
                reward.server.fleet_spec(),
                role=reward.model_kind,
                model_path=reward.server.model or "",
                api_key=_key_shown(reward.server.fleet_spec(), reward.server.api_key_env),
                ray_address=ray_address(profile),
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
            if i < launched and fleet.role.takes_weights:  # rlrm's own server: the one folder it loads from
                argv = [*argv, *fleet.backend.weights_dir_flags(str(_weights_folder(profile)))]
            lines.append(f"# {fleet.section} {what}: {env}{shlex.join(argv)}")
        if fleet.spec.addresses:
            lines.append(f"# {fleet.section}: running servers {', '.join(fleet.spec.addresses)} (nothing launched)")
    return lines


def _key_shown(spec, api_key_env: str | None) -> str | None:
    """What stands for the servers' key: the variable a profile names, else the run's own fresh key (launched
    servers but SGLang's, rlrm/launch/fleet/server_fleet.py fleet_key), else none."""
    if api_key_env:
        return f"${api_key_env}"
    return None if spec.addresses or not backend_for(spec.backend).key_in_env else "<run key>"


def _weights_folder(profile: Profile):
    parent = profile.rollout.server.weights_dir
    return (Path(parent).expanduser() if parent else default_weights_dir()) / "rlrm-weights-<pid>-<id>"


def _env(fleet: ServerFleet, i: int) -> str:
    """The variables replica `i` is started with, as the pool sets them (the key only where it reads it)."""
    env = fleet.replica_launch().env(i)
    return "".join(f"{k}={shlex.quote(v)} " for k, v in env.items() if v is not None)
