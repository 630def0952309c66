"""What every server fleet a profile launches shares: `reward.server` and `rollout.server`.

One fleet abstraction (rlrm/launch/fleet/server_fleet.py) launches, supervises and stops the policy's rollout
servers and the reward model's servers alike; these are the keys both sections read.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from rlrm.config.section import Section
from rlrm.launch.common.auth import key_from_env
from rlrm.launch.fleet.backends import backend_for
from rlrm.launch.fleet.spec import Batching, FleetSpec

ServerBackend = Literal["embedded", "vllm", "sglang"]
RayStrategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
# resources every Ray node has: they say how much a replica takes, not where it goes
_RAY_BUILTIN = {"CPU", "GPU", "memory", "object_store_memory"}


class ServerFleetConfig(Section):
    """Server processes launched by rlrm (`replicas` of `backend`), or already running at `addresses`."""

    section: ClassVar[str] = "server"  # the profile path named in error messages

    replicas: int = Field(1, ge=1, le=16, description="Server processes rlrm launches (behind the router or balancer).")
    backend: ServerBackend = Field(
        "embedded",
        description="Server implementation: embedded (rlrm's transformers server, CPU or GPU), vllm or sglang (a GPU "
        "machine with the package installed; `--dry-run` shows the command line of every process).",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Model dtype on the servers.")
    max_batch: int = Field(64, gt=0, description="Most requests per batched forward on a server.")
    threads: int = Field(1, ge=0, description="torch CPU threads per embedded server (0: torch's default).")
    gpu_ids: list[int] = Field(
        default_factory=list,
        description="GPU ids handed out to replicas round-robin through CUDA_VISIBLE_DEVICES (empty: inherit the environment).",
    )
    extra_args: list[str] = Field(
        default_factory=list,
        description="Extra command-line arguments appended to every launched server (engine flags); not --port: "
        "rlrm starts each replica on a free port of its own. reward.server's are part of the reward contract: "
        "changing one refuses --resume unless reward.allow_contract_change=true (so does resuming a run started "
        "before they were).",
    )
    addresses: list[str] = Field(
        default_factory=list,
        description="Use these running servers instead: http://host:port, or an OpenAI-compatible API's base URL "
        "(https://host/v1, as the OpenAI client's base_url; the key from api_key_env).",
    )
    served_model_name: str | None = Field(
        None,
        description="The model name the servers answer to (the `model` of every request). Running `addresses`: the "
        "name they serve, checked against their /v1/models at start (a hand-started vLLM serves its --model path "
        "unless given --served-model-name). Launched vllm/sglang replicas are started with it. None: the model's "
        "own name (reward.server.model as written in the profile, e.g. tiny:judge; the policy's folder).",
    )
    gpu_memory_utilization: float = Field(
        0.85,
        gt=0,
        le=1,
        description="vllm/sglang replicas on a GPU: the share of the device's memory each may take "
        "(vLLM --gpu-memory-utilization, SGLang --mem-fraction-static); lower it when roles share a GPU. "
        "On CPU vLLM takes VLLM_CPU_KVCACHE_SPACE GiB of KV cache instead (1 unless set in the environment).",
    )
    api_key_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Name of the environment variable holding the servers' bearer key (the key itself is never in a profile "
        "or config.yaml); rlrm passes it to the servers it launches in their environment, never on a command line.",
    )
    router: Literal["auto", "sglang", "client"] = Field(
        "auto",
        description="sglang: SGLang router (generation only: it does not route /classify); client: rlrm's balancer; "
        "auto: sglang when installed and it can route.",
    )
    start_timeout_s: float = Field(
        180.0,
        gt=0,
        description="Time allowed for servers to become ready at start: launched ones to load, answer their health "
        "check and (vLLM, SGLang) a first request (60 s at least for that), running addresses (a hosted API "
        "included) to pass their first check (each probe of that check is one request, bounded by the section's "
        "request_timeout_s too); a router in front of launched replicas has as long again to register them.",
    )
    launch_on: Literal["local", "ray"] = Field(
        "local",
        description="local: the replicas are subprocesses on the trainer's node; ray: each replica is owned by a small "
        "Ray actor on the node Ray places it on (one placement-group bundle per replica, on the cluster the actor ranks "
        "or reward workers join), which starts it there on a free port of that node and stops it with the run.",
    )
    placement: RayStrategy = Field(
        "PACK",
        description="launch_on=ray: placement-group strategy of the replicas, as actor.placement: PACK (as few nodes as "
        "possible), SPREAD, STRICT_SPREAD (one replica per node), STRICT_PACK (all on one node).",
    )
    node_resource: str | None = Field(
        None,
        description="launch_on=ray: the Ray resource that picks the replicas' nodes; each replica takes one unit. A "
        "custom resource (`ray start --resources='{\"rollout_server\": 2}'` on the nodes that host them, 2 replicas "
        "each), or `node:<IP>` (Ray's own resource of the node with that IP: one replica there). None: any node with room.",
    )
    gpus_per_replica: int = Field(
        0,
        ge=0,
        description="launch_on=ray: GPUs Ray reserves for each replica (it sets CUDA_VISIBLE_DEVICES; gpu_ids "
        "is for local replicas).",
    )

    @field_validator("addresses", "extra_args", "gpu_ids", mode="before")
    @classmethod
    def _one_item(cls, value: object) -> object:
        return [value] if isinstance(value, (str, int)) else value  # `--set reward.server.addresses=http://h:1`

    @field_validator("extra_args")
    @classmethod
    def _no_key_in_args(cls, args: list[str]) -> list[str]:
        from pydantic_core import PydanticCustomError

        for i, arg in enumerate(args):
            if _names_a_key_flag(str(arg)):
                raise PydanticCustomError(  # not echoed back: the next item, or the rest of this one, is the key
                    "credentials",
                    "entry {i} passes a key on the servers' command line, which config.yaml keeps and every local "
                    "user can read (ps): name the environment variable holding it in api_key_env instead",
                    {"i": i},
                )
        return args

    @field_validator("addresses")
    @classmethod
    def _addresses_are_urls(cls, urls: list[str]) -> list[str]:
        from urllib.parse import urlsplit

        from pydantic_core import PydanticCustomError

        for i, url in enumerate(urls):
            try:
                parts = urlsplit(url)
                parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
            except ValueError:
                parts = None
            if parts is not None and (parts.username or parts.password):
                raise PydanticCustomError(
                    "credentials",
                    "entry {i} carries credentials in the URL; give the URL without them and name the environment "
                    "variable holding the key in api_key_env",
                    {"i": i},
                )
            if parts is not None and (parts.query or parts.fragment):  # `?api_key=...`: never echoed back
                raise PydanticCustomError(
                    "credentials",
                    "entry {i} has a query or fragment in its URL (not shown: it may hold a key); give the server's "
                    "URL alone, such as https://api.example.com/v1, and name the environment variable holding the "
                    "key in api_key_env",
                    {"i": i},
                )
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
                raise PydanticCustomError(
                    "address",
                    "entry {i} ({url}) is not an http(s) URL of a server, such as http://127.0.0.1:8000",
                    {"i": i, "url": repr(url)},
                )
        return urls

    @field_validator("node_resource")
    @classmethod
    def _node_resource_names_nodes(cls, name: str | None) -> str | None:
        import ipaddress

        from pydantic_core import PydanticCustomError

        if name is None:
            return None
        if name in _RAY_BUILTIN or not name.strip() or name != name.strip():
            raise PydanticCustomError(
                "node_resource",
                "{name} does not pick nodes; name a custom Ray resource the chosen nodes were started "
                "with (ray start --resources={example}) or node:<IP>",
                {"name": repr(name), "example": """'{"rollout_server": 2}'"""},
            )
        if name.startswith("node:"):
            try:
                ipaddress.ip_address(name[len("node:") :])
            except ValueError:
                raise PydanticCustomError(
                    "node_resource",
                    "{name} is not node:<IP> (Ray names each node's own resource by its IP, such as "
                    "node:10.0.0.2); for a label, start the nodes with a custom resource and name it",
                    {"name": repr(name)},
                ) from None
        return name

    @model_validator(mode="after")
    def _ray_keys_need_ray(self) -> ServerFleetConfig:
        s = self.section
        if self.launch_on == "local":
            if self.node_resource is not None or self.gpus_per_replica:
                key = "node_resource" if self.node_resource is not None else "gpus_per_replica"
                raise ValueError(f"{s}.{key} places replicas with Ray: set {s}.launch_on=ray too")
        else:
            if self.addresses:
                raise ValueError(
                    f"{s}.launch_on=ray launches replicas, but {s}.addresses names running servers; drop one of them"
                )
            if self.gpu_ids:
                raise ValueError(
                    f"{s}.gpu_ids is for local replicas; with launch_on=ray use {s}.gpus_per_replica "
                    "(Ray assigns the devices)"
                )
        return self

    def read_api_key(self) -> str | None:
        """The key `api_key_env` names, read now (ConfigError when the variable is unset); None without one."""
        return key_from_env(self.api_key_env, f"{self.section}.api_key_env") if self.api_key_env else None

    batch_wait_ms: float = Field(
        100.0,
        ge=0.0,
        description="Embedded replicas that generate (a policy, a judge): the longest a generation batch waits for "
        "more requests after its first (they arrive over HTTP one by one)...",
    )
    batch_gap_ms: float = Field(5.0, ge=0.0, description="...closing it sooner once no request arrived for this long.")

    def fleet_spec(self) -> FleetSpec:
        """The settings the fleet that launches these servers reads (rlrm/launch/fleet/spec.py)."""
        return FleetSpec(
            section=self.section,
            replicas=self.replicas,
            backend=self.backend,
            dtype=self.dtype,
            max_batch=self.max_batch,
            threads=self.threads,
            gpu_ids=tuple(self.gpu_ids),
            extra_args=tuple(self.extra_args),
            addresses=tuple(self.addresses),
            router=self.router,
            start_timeout_s=self.start_timeout_s,
            launch_on=self.launch_on,
            placement=self.placement,
            node_resource=self.node_resource,
            gpus_per_replica=self.gpus_per_replica,
            served_model_name=self.served_model_name,
            gpu_memory_utilization=self.gpu_memory_utilization,
            batching=Batching(self.batch_wait_ms, self.batch_gap_ms),
        )


class RolloutServerConfig(ServerFleetConfig):
    """`rollout.backend: server`: the policy served by these replicas, new weights loaded into them after every update."""

    section: ClassVar[str] = "rollout.server"

    # None (rollout.max_batch_size) is resolved in rlrm/engine/served.py before the fleet starts
    max_batch: int | None = Field(  # type: ignore[assignment]
        None,
        gt=0,
        description="Most requests per batched forward on a replica (None: rollout.max_batch_size, as in process).",
    )
    # None (model.dtype) is resolved in rlrm/engine/served.py too
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(  # type: ignore[assignment]
        None,
        description="Model dtype on the policy replicas (None: model.dtype, as the in-process engine's copy).",
    )

    weights_dir: str | None = Field(
        None,
        description="Where the trainer writes each new version's safetensors for the replicas to load (a fast local "
        "folder every replica can read; None: /dev/shm when it exists, else the system temp folder). Replicas placed "
        "on other machines (launch_on=ray) read it at the same path: name a shared filesystem (checked at start).",
    )
    weight_sync: Literal["disk", "distributed"] = Field(
        "disk",
        description="How new weights reach the replicas: disk (safetensors in weights_dir, then SGLang's "
        "/update_weights_from_disk on every replica) or distributed (the trainer joins a process group with the "
        "replicas, SGLang's /init_weights_update_group, and broadcasts every tensor to them with "
        "/update_weights_from_distributed: no file written or read, but for a resume's weights, which the replicas "
        "start from and which are deleted after the first broadcast). Embedded and sglang replicas; not vllm.",
    )
    weight_sync_backend: Literal["auto", "gloo", "nccl"] = Field(
        "auto",
        description="weight_sync=distributed: the process group's backend. nccl (GPU tensors; the trainer and every "
        "replica on CUDA, each on a GPU of its own: NCCL refuses two on one) or gloo (CPU tensors, over TCP); auto: nccl "
        "when the replicas run on GPUs (backend sglang, gpu_ids or gpus_per_replica set) and the trainer has CUDA, "
        "else gloo, and gloo with a warning where a replica reports the trainer's GPU or another replica's.",
    )
    sync_timeout_s: float = Field(
        300.0,
        gt=0,
        description="Longest a replica may take to load new weights (distributed: also to join the weight-update "
        "group, and each broadcast).",
    )
    request_timeout_s: float = Field(600.0, gt=0, description="Longest one /generate request may take.")
    max_retries: int = Field(
        3, ge=0, description="Retries of a failed /generate on another replica (counted as rollout/retries)."
    )

    @model_validator(mode="after")
    def _distributed_sync_needs_sglang_api(self) -> RolloutServerConfig:
        if self.weight_sync == "distributed" and not backend_for(self.backend).supports_distributed_weight_sync:
            raise ValueError(
                f"rollout.server.weight_sync=distributed is not served by {self.backend} (it documents no equivalent of "
                "SGLang's update_weights_from_distributed); use rollout.server.weight_sync=disk"
            )
        return self

    def fleet_spec(self) -> FleetSpec:
        """The base settings, with the policy replicas' weight sync and its timeout."""
        return replace(
            super().fleet_spec(),
            dtype=self.dtype or "float32",  # without a profile; rlrm/engine/served.py gives model.dtype
            weight_sync=self.weight_sync,
            sync_timeout_s=self.sync_timeout_s,
        )


_KEY_FLAGS = ("--api-key", "--admin-api-key")


def _names_a_key_flag(arg: str) -> bool:
    """`--api-key`, as the engines' parsers read it: vLLM's takes `--api_key` for it, and argparse an unambiguous
    prefix (`--api-k`, `--admin`)."""
    flag = arg.split("=", 1)[0].replace("_", "-").lower()
    if not flag.startswith("--") or len(flag) < 5:
        return False
    return any(key.startswith(flag) for key in _KEY_FLAGS)
