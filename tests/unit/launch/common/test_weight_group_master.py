"""The weight-update group's master host is resolved before torch's store is asked to reach it."""

from __future__ import annotations

import pytest

from rlrm.errors import RolloutServerError
from rlrm.launch.common.weight_group import resolve_master


def test_a_name_that_does_not_resolve_is_one_line_naming_it():
    with pytest.raises(RolloutServerError) as refused:
        resolve_master("no-such-trainer.invalid")  # .invalid never resolves (RFC 2606)
    message = str(refused.value)
    assert "master host 'no-such-trainer.invalid' does not resolve" in message and "\n" not in message


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_addresses_and_local_names_pass(host):
    resolve_master(host)


@pytest.mark.parametrize(("device", "joined"), [("cuda", "cuda:1"), (None, "cuda:1"), ("cuda:0", "cuda:0")])
def test_an_nccl_member_joins_on_an_indexed_gpu_whatever_device_it_names(monkeypatch, device, joined):
    """A replica started with `--device auto` holds "cuda" (no index), which torch.cuda.set_device refuses: the
    member joins on the process's current GPU. CUDA and NCCL are stood in for (this machine has neither)."""
    import torch
    import torch.distributed as dist

    from rlrm.launch.common.weight_group import join_group

    class StandInNCCL:  # torch's ProcessGroupNCCL, as far as join_group uses it
        class Options:
            pass

        def __init__(self, store, rank, world_size, opts):
            self.rank = rank

    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: chosen.append(torch.device(d)))
    monkeypatch.setattr(dist, "ProcessGroupNCCL", StandInNCCL, raising=False)
    group = join_group("127.0.0.1", 1, 1, 2, "weights", "nccl", 5.0, device=device, store=dist.HashStore())
    assert group.device == torch.device(joined) and chosen == [torch.device(joined)]
