"""SGLang's distributed weight update on the embedded policy server: the trainer broadcasts, replicas receive.

    POST /init_weights_update_group {master_address, master_port, rank_offset, world_size,
         group_name="weight_update_group", backend="nccl"}                       -> {success, message}
    POST /update_weights_from_distributed {names, dtypes, shapes, group_name, flush_cache,
         abort_all_requests, weight_version, load_format}                         -> {success, message}
    POST /destroy_weights_update_group {group_name}                               -> {success, message}

The shapes of SGLang's io_struct requests (InitWeightsUpdateGroupReqInput,
UpdateWeightsFromDistributedReqInput, DestroyWeightsUpdateGroupReqInput). The trainer is rank 0;
this server (one rank) joins as `rank_offset`; the init call returns once every member joined
(rlrm/launch/common/weight_group.py). An update receives each tensor by broadcast from rank 0 in the order
of `names` into fresh buffers, always all of them (a member that skips one deadlocks the group),
THEN checks names, shapes and dtypes against the model as /update_weights_from_disk does, THEN puts
them in place under the same lock (rlrm/launch/server/weight_routes.py: a decode batch never mixes
versions). A refused update answers success false with the reason, keeps the served version and
leaves the group usable for the next one. `load_format` (SGLang's "flattened_bucket") is refused:
the embedded server receives tensor by tensor. Joining and each broadcast are bounded by
`--weight-sync-timeout-s`. Policy servers only, like the disk path.

One group at a time: while a join is pending, or while a group of another name is joined, a new
`/init_weights_update_group` gets 409 (a flood of joins to a master that never answers holds one join, not
every thread). A join runs in a thread of its own, never in the pool that serves loads, and never keeps
the process from stopping: SIGTERM ends the server at once, pending join or not. The request gives up at
`--weight-sync-timeout-s` even where torch's store would wait forever.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from pydantic import BaseModel, ConfigDict, Field

from rlrm.errors import RolloutServerError
from rlrm.launch.common.weight_group import GROUP, WeightGroup, join_group, torch_dtype
from rlrm.launch.server.protocol import RequestError
from rlrm.launch.server.weight_routes import WeightState, check_fits, require_policy

_log = logging.getLogger("rlrm.server")

# join threads (pending, or stuck past their bound on a master that never answers) a server keeps at most
MAX_JOIN_THREADS = 3


class InitWeightsUpdateGroupRequest(BaseModel):
    model_config = ConfigDict(extra="allow", str_strip_whitespace=True)

    master_address: str = Field(min_length=1)  # an empty host would make the store wait on nothing
    master_port: int = Field(ge=1, le=65535)
    rank_offset: int
    world_size: int = Field(ge=2)
    group_name: str = GROUP
    backend: str = "nccl"


class UpdateWeightsFromDistributedRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow"
    )  # flush_cache: no prefix cache here; abort_all_requests: nothing is aborted

    names: list[str]
    dtypes: list[str]
    shapes: list[list[int]]
    group_name: str = GROUP
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: str | int | None = None
    load_format: str | None = None


class DestroyWeightsUpdateGroupRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    group_name: str = GROUP


class WeightGroups:
    """The groups this server joined, by name; updates go through `state` (its lock and version)."""

    def __init__(self, state: WeightState, device, timeout_s: float):
        self.state, self.device, self.timeout_s = state, device, timeout_s
        self.groups: dict[str, WeightGroup] = {}
        self.joining: str | None = None  # the group a pending join is for
        self.join_threads = 0  # join threads still running, the ones given up on at the bound included

    async def init(self, body: InitWeightsUpdateGroupRequest) -> dict:
        if not 1 <= body.rank_offset < body.world_size:
            raise RequestError(
                f"rank_offset {body.rank_offset} is outside 1..{body.world_size - 1} (rank 0 is the trainer)"
            )
        self._check_one_group(body.group_name)
        old = self.groups.pop(body.group_name, None)
        if old is not None:  # joined again (as SGLang does): the old group is left first
            old.close()
        device = self.device if body.backend == "nccl" else None
        args = (body.master_address, body.master_port, body.rank_offset, body.world_size, body.group_name)
        self.joining = body.group_name
        self.join_threads += 1
        try:
            # torch's TCPStore waits forever on a master that accepts and never answers: the bound is kept here,
            # and a thread still stuck after it is left behind (counted: MAX_JOIN_THREADS)
            joined = _join_in_own_thread((*args, body.backend, self.timeout_s, device), self._join_ended)
            group = await asyncio.wait_for(joined, self.timeout_s)
        except asyncio.TimeoutError:
            return _no(
                f"could not join weight-update group {body.group_name!r}: its master {body.master_address}:"
                f"{body.master_port} did not answer within {self.timeout_s:g} s (--weight-sync-timeout-s; rollout.server.sync_timeout_s when rlrm launched this server)"
            )
        except (RolloutServerError, RuntimeError, TimeoutError, ValueError, OSError) as exc:
            return _no(f"could not join weight-update group {body.group_name!r}: {exc}")
        except Exception as exc:  # noqa: BLE001 - torch's store or a bug below: still a failed join, logged
            _log.exception("joining weight-update group %r failed", body.group_name)
            return _no(f"could not join weight-update group {body.group_name!r}: {type(exc).__name__}: {exc}")
        finally:
            self.joining = None
        self.groups[body.group_name] = group
        return {
            "success": True,
            "message": f"joined {body.group_name!r} as rank {body.rank_offset} of {body.world_size}",
        }

    def _check_one_group(self, name: str) -> None:
        """409 while a join is pending, or while another group is joined: one group at a time."""
        if self.joining is not None:
            raise RequestError(
                f"a join of weight-update group {self.joining!r} is pending; one group at a time: wait for it to "
                f"finish or time out ({self.timeout_s:g} s, --weight-sync-timeout-s)",
                status=409,
            )
        if self.join_threads >= MAX_JOIN_THREADS:
            raise RequestError(
                f"{self.join_threads} earlier joins to masters that never answered still hold a thread each; "
                "one group at a time: retry once they end, or restart this server",
                status=409,
            )
        other = next((g for g in self.groups if g != name), None)
        if other is not None:
            raise RequestError(
                f"this server is in weight-update group {other!r}; one group at a time: "
                "POST /destroy_weights_update_group first",
                status=409,
            )

    def _join_ended(self) -> None:
        self.join_threads -= 1

    async def update(self, body: UpdateWeightsFromDistributedRequest) -> dict:
        group = self.groups.get(body.group_name)
        if group is None:
            return _no(f"no weight-update group {body.group_name!r}: POST /init_weights_update_group first")
        if not len(body.names) == len(body.dtypes) == len(body.shapes):
            return _no(
                f"{len(body.names)} names, {len(body.dtypes)} dtypes and {len(body.shapes)} shapes: one of each per tensor"
            )
        if body.load_format is not None:
            return _no(
                f"load_format {body.load_format!r} is not served here; send tensors one by one (load_format null)"
            )
        try:
            dtypes = [torch_dtype(d) for d in body.dtypes]
        except ValueError as exc:
            return _no(str(exc))
        model = self.state.backend.model

        def receive() -> dict:
            import torch

            tensors = {}
            for name, dtype, shape in zip(body.names, dtypes, body.shapes):  # every one, even after a bad name
                buffer = torch.empty(shape, dtype=dtype, device=group.device)
                group.broadcast(buffer)
                tensors[name] = buffer
            group.synchronize()
            return check_fits(tensors, model, "the broadcast weights")

        return await self.state.load(receive, body.weight_version)

    def destroy(self, body: DestroyWeightsUpdateGroupRequest) -> dict:
        group = self.groups.pop(body.group_name, None)
        if group is None:
            return _no(f"no weight-update group {body.group_name!r}")
        group.close()
        return {"success": True, "message": f"left {body.group_name!r}"}


def _join_in_own_thread(args: tuple, on_end) -> asyncio.Future:
    """A future of `join_group(*args)`, run in a daemon thread: it takes no slot of the pool loads run in, and a
    process told to stop does not wait for it (asyncio's pool threads are joined at exit). `on_end()` runs on
    the event loop once the thread ends; a group joined after the future was cancelled is left at once."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result, error) -> None:
        on_end()
        if future.done():  # given up (the join's bound, or the server stops)
            if error is None:
                result.close()
        elif error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        try:
            result, error = join_group(*args), None
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting request as it is
            result, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop is closed: the server stopped meanwhile
            pass

    threading.Thread(target=run, name="weight-group-join", daemon=True).start()
    return future


def _no(message: str) -> dict:
    return {"success": False, "message": message}


def add_distributed_routes(app, cfg, groups: WeightGroups) -> None:
    @app.post("/init_weights_update_group")
    async def init_weights_update_group(body: InitWeightsUpdateGroupRequest):
        require_policy(cfg)
        return await groups.init(body)

    @app.post("/update_weights_from_distributed")
    async def update_weights_from_distributed(body: UpdateWeightsFromDistributedRequest):
        require_policy(cfg)
        return await groups.update(body)

    @app.post("/destroy_weights_update_group")
    async def destroy_weights_update_group(body: DestroyWeightsUpdateGroupRequest):
        require_policy(cfg)
        return await asyncio.to_thread(groups.destroy, body)
