"""What a server fleet is launched from: the settings `ServerFleet` and `RayReplicas` read, and nothing else.

    spec = reward.server.fleet_spec()    # rlrm/config/servers.py builds it; the policy's: rlrm.engine.served.fleet_spec
                                         # (rollout.server's unset max_batch and dtype resolved from the profile)
    fleet = ServerFleet(spec, role="policy", model_path=path)

Launch owns this type; the profile's `rollout.server` and `reward.server` sections turn themselves into it,
so the fleet never probes a config object for keys it may lack.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Batching:
    """How an embedded policy replica forms its generation batches (`--batch-wait-ms`, `--batch-gap-ms`)."""

    wait_ms: float
    gap_ms: float


@dataclass(frozen=True)
class FleetSpec:
    """A fleet's replicas, where they run and how they are reached.

    Attributes:
        section: the profile path these settings come from, named in errors (e.g. rollout.server).
        replicas, backend, dtype, threads, gpu_ids, extra_args, addresses, router, start_timeout_s: as the
            section's keys say (rlrm/config/servers.py).
        max_batch: most requests per batched forward (None: 64).
        launch_on, placement, node_resource, gpus_per_replica: local subprocesses or Ray placement.
        model: the model running `addresses` must serve (reward servers; None: not checked).
        served_model_name: the name replicas answer to (launched: --served-model-name; running: checked
            against /v1/models); None: the model's name.
        gpu_memory_utilization: the share of a GPU a launched vLLM replica may take.
        batching: the batch window of embedded replicas that generate (None: the server's defaults).
        weight_sync, sync_timeout_s: how policy replicas receive weights (distributed: they get the group's timeout).
    """

    section: str = "server"
    replicas: int = 1
    backend: str = "embedded"
    dtype: str = "float32"
    max_batch: int | None = 64
    threads: int = 1
    gpu_ids: tuple[int, ...] = ()
    extra_args: tuple[str, ...] = ()
    addresses: tuple[str, ...] = ()
    router: str = "auto"
    start_timeout_s: float = 180.0
    launch_on: str = "local"
    placement: str = "PACK"
    node_resource: str | None = None
    gpus_per_replica: int = 0
    model: str | None = None
    served_model_name: str | None = None
    gpu_memory_utilization: float = 0.85
    batching: Batching | None = None
    weight_sync: str = "disk"
    sync_timeout_s: float | None = None

    @property
    def on_ray(self) -> bool:
        """Whether launched replicas are placed on Ray nodes (running `addresses` are never placed)."""
        return self.launch_on == "ray" and not self.addresses
