"""Security rules without servers: no invented key for running addresses or SGLang, and the bind rule."""

from __future__ import annotations

import pytest

from rlrm.config.servers import RolloutServerConfig
from rlrm.launch.fleet.server_fleet import fleet_key


def test_running_addresses_and_sglang_get_no_invented_key():
    assert fleet_key(RolloutServerConfig(addresses=["http://127.0.0.1:1"]).fleet_spec(), None) is None
    assert (
        fleet_key(RolloutServerConfig(backend="sglang").fleet_spec(), None) is None
    )  # SGLang takes a key on its command line only


def test_the_bind_rule_itself():
    from rlrm.errors import ConfigError
    from rlrm.launch.common.auth import check_bind

    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        check_bind(host, None, allow_unauthenticated=False)
    check_bind("0.0.0.0", "key", allow_unauthenticated=False)
    check_bind("0.0.0.0", None, allow_unauthenticated=True)
    with pytest.raises(ConfigError):
        check_bind("10.0.0.2", None, allow_unauthenticated=False)
