"""A weight-update process group between the trainer (rank 0) and rollout replicas, outside the default group.

    group = join_group("127.0.0.1", port, rank=1, world_size=3, group_name="weight_update_group",
                       backend="gloo", timeout_s=300)          # blocks until every member joined
    group.broadcast(tensor)                                    # rank 0 sends, the others receive in place
    group.close()

What SGLang's `init_weights_update_group` builds, made without `torch.distributed.init_process_group`:
the trainer may already hold the default group for its FSDP ranks, and a server must be able to
join, leave and join again. A TCPStore (rank 0 is its master) under a PrefixStore named after the
group, then ProcessGroupGloo (CPU tensors) or ProcessGroupNCCL (CUDA tensors; needs a CUDA build of
torch and a GPU on every member; not run on this machine). Each call and the joining itself are
bounded by `timeout_s`.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import TYPE_CHECKING, Any

from rlrm.errors import RolloutServerError

if TYPE_CHECKING:
    import torch

BACKENDS = ("gloo", "nccl")

GROUP = "weight_update_group"  # SGLang's default name of the trainer's weight-update group


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype SGLang's `dtypes` entry names ("bfloat16"; "torch.bfloat16" too); ValueError when none."""
    import torch

    short = name.removeprefix("torch.")
    dtype = getattr(torch, short, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype {name!r} is not a torch dtype (such as float32 or bfloat16)")
    return dtype


def dtype_name(dtype: object) -> str:
    """`torch.bfloat16` -> "bfloat16", the form SGLang's `getattr(torch, dtype)` reads."""
    return str(dtype).removeprefix("torch.")


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def local_ip_towards(host: str) -> str:
    """This machine's address on the route to `host` (a UDP socket is connected, nothing is sent)."""
    if is_loopback(host):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((host, 9))
            return sock.getsockname()[0]
        except OSError:
            return socket.gethostbyname(socket.gethostname())


class WeightGroup:
    """One member's handle on a joined group: `broadcast` from rank 0, `close` to leave."""

    def __init__(self, pg: Any, store: Any, rank: int, world_size: int, device: torch.device, timeout_s: float) -> None:
        self.pg, self.store, self.rank, self.world_size = pg, store, rank, world_size
        self.device, self.timeout_s = device, timeout_s

    def broadcast(self, tensor: torch.Tensor) -> None:
        """Rank 0's `tensor` into every member's `tensor` (same shape and dtype everywhere); raises on failure."""
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = 0, 0
        self.pg.broadcast([tensor], opts).wait()

    def synchronize(self) -> None:
        """Wait for the broadcasts queued on the GPU (nccl's `wait` only orders the stream); nothing to do on CPU."""
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

    def close(self) -> None:
        """Leave the group (the other members' next call fails instead of waiting out the timeout)."""
        pg, self.pg, self.store = self.pg, None, None
        if pg is not None:
            try:
                pg.shutdown()
            except (RuntimeError, AttributeError):
                pass


def resolve_master(host: str) -> None:
    """RolloutServerError (one line naming `host`) unless `host` resolves to an address: found in the resolver's
    answer, at once, rather than after the group's join timeout."""
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise RolloutServerError(
            f"the weight-update group's master host {host[:100]!r} does not resolve ({reason}); give an address "
            "every member can reach (an IP, or a name in DNS or /etc/hosts)"
        ) from None


def host_store(master_address: str, world_size: int, timeout_s: float) -> Any:
    """Rank 0's TCPStore, listening on a port the OS picks (`.port`), for `join_group(..., store=)`: bound before
    any member is told the port, so no other process can take it in between (a port picked free and bound later
    can be, on a busy machine)."""
    import datetime

    import torch.distributed as dist

    resolve_master(master_address)
    timeout = datetime.timedelta(seconds=timeout_s)
    return dist.TCPStore(master_address, 0, world_size, is_master=True, timeout=timeout, wait_for_workers=False)


def join_group(
    master_address: str,
    master_port: int,
    rank: int,
    world_size: int,
    group_name: str,
    backend: str,
    timeout_s: float,
    device: torch.device | str | None = None,
    store: Any = None,
) -> WeightGroup:
    """Join (rank 0: host) a weight-update group; returns once every member joined.

    Args:
        master_address, master_port: where rank 0's TCPStore listens.
        rank, world_size: this member's rank and the group's size (trainer 0, replicas 1..).
        group_name: prefix of the group's keys in the store.
        backend: gloo (CPU tensors) or nccl (CUDA tensors).
        timeout_s: bound on joining and on every broadcast.
        device: nccl only: the CUDA device this member's tensors live on.
        store: rank 0's store from `host_store`, bound before the members were told its port (else made here).

    Raises:
        RolloutServerError: nccl without CUDA, an unknown backend, or a master host that does not resolve.
        RuntimeError, TimeoutError: the other members did not join in time.
    """
    import datetime

    import torch
    import torch.distributed as dist

    if backend not in BACKENDS:
        raise RolloutServerError(
            f"weight-update group backend {backend!r} is not served; use one of {', '.join(BACKENDS)}"
        )
    timeout = datetime.timedelta(seconds=timeout_s)
    if backend == "nccl" and (not torch.cuda.is_available() or not hasattr(dist, "ProcessGroupNCCL")):
        raise RolloutServerError(
            "backend nccl needs CUDA on every member of the weight-update group; this process has "
            "none: use rollout.server.weight_sync_backend=gloo"
        )
    if store is None:
        resolve_master(master_address)  # torch's store retries a name that never resolves until the whole timeout
        store = dist.TCPStore(
            master_address, master_port, world_size, is_master=(rank == 0), timeout=timeout, wait_for_workers=False
        )
    prefixed = dist.PrefixStore(group_name, store)
    if backend == "gloo":
        opts = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]  # private in torch's stubs: gloo's devices are set only here
        opts._timeout = timeout
        # every member on this machine: loopback; else the interface that reaches rank 0
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=local_ip_towards(master_address))]
        pg = dist.ProcessGroupGloo(prefixed, rank, world_size, opts)
        return WeightGroup(pg, store, rank, world_size, torch.device("cpu"), timeout_s)
    device = torch.device(device if device is not None else "cuda")
    if device.index is None:  # "cuda" (a server's --device auto): the process's current GPU, which set_device needs
        device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(device)
    opts = dist.ProcessGroupNCCL.Options()
    opts._timeout = timeout
    nccl_pg = dist.ProcessGroupNCCL(prefixed, rank, world_size, opts)
    return WeightGroup(nccl_pg, store, rank, world_size, device, timeout_s)
