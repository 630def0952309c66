"""A Ray address of auto, local or unset is not probed (the probes of real and dead heads are in tests/integration/cli/test_ray_address_unreachable.py)."""

from __future__ import annotations

from rlrm.launch.common.ray_head import check_ray_head


def test_auto_local_and_unset_are_not_probed():
    for address in (None, "auto", "local"):
        check_ray_head(address, "actor.ray_address", timeout_s=0.01)
