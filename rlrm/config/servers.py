"""What every server fleet a profile launches shares: `reward.server` and `rollout.server`.

One fleet abstraction (rlrm/launch/fleet.py) launches, supervises and stops the policy's rollout
servers and the reward model's servers alike; these are the keys both sections read.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlrm.launch.auth import key_from_env

ServerBackend = Literal["embedded", "vllm", "sglang"]


class ServerFleetConfig(BaseModel):
    """Server processes launched by rlrm (`replicas` of `backend`), or already running at `addresses`."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
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
        default_factory=list, description="Extra command-line arguments appended to every launched server (engine flags)."
    )
    addresses: list[str] = Field(default_factory=list, description="Use these running servers (http://host:port) instead.")
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
    start_timeout_s: float = Field(180.0, gt=0, description="Total time allowed for servers to become healthy.")

    @field_validator("addresses", "extra_args", "gpu_ids", mode="before")
    @classmethod
    def _one_item(cls, value):
        return [value] if isinstance(value, (str, int)) else value  # `--set reward.server.addresses=http://h:1`

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
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
                raise PydanticCustomError(
                    "address", "entry {i} ({url}) is not an http(s) URL of a server, such as http://127.0.0.1:8000",
                    {"i": i, "url": repr(url)},
                )
        return urls

    def read_api_key(self) -> str | None:
        """The key `api_key_env` names, read now (ConfigError when the variable is unset); None without one."""
        return key_from_env(self.api_key_env, f"{self.section}.api_key_env") if self.api_key_env else None


class RolloutServerConfig(ServerFleetConfig):
    """`rollout.backend: server`: the policy served by these replicas, new weights loaded into them after every update."""

    section: ClassVar[str] = "rollout.server"

    max_batch: int | None = Field(
        None, gt=0, description="Most requests per batched forward on a replica (None: rollout.max_batch_size, as in process)."
    )

    batch_wait_ms: float = Field(
        100.0, ge=0.0,
        description="Embedded replicas: the longest a generation batch waits for more requests after its first (they "
        "arrive over HTTP one by one)...",
    )
    batch_gap_ms: float = Field(
        5.0, ge=0.0, description="...closing it sooner once no request arrived for this long."
    )
    weights_dir: str | None = Field(
        None,
        description="Where the trainer writes each new version's safetensors for the replicas to load (a fast local "
        "folder every replica can read; None: /dev/shm when it exists, else the system temp folder).",
    )
    sync_timeout_s: float = Field(300.0, gt=0, description="Longest a replica may take to load new weights.")
    request_timeout_s: float = Field(600.0, gt=0, description="Longest one /generate request may take.")
    max_retries: int = Field(3, ge=0, description="Retries of a failed /generate on another replica (counted as rollout/retries).")
