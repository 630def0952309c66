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
