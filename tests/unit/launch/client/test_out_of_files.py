"""The reward client at its open-files limit (rlrm/launch/client/balancer.py): socket() fails before a byte is sent.
That is this process's limit, not the replica's fault: one non-retryable error naming `ulimit -n`, the replica kept
up. It was a retryable "connection error" that marked a healthy replica down, retried, then defaulted the sample."""

from __future__ import annotations

import asyncio
import errno

import aiohttp
import pytest

from rlrm.call_errors import CallError, TransientError
from rlrm.launch.client.balancer import ReplicaBalancer

URL = "http://127.0.0.1:9"


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE])
def test_out_of_file_descriptors_is_named_and_not_retried(monkeypatch, code):
    balancer = ReplicaBalancer([URL])
    balancer.healthy[URL] = True

    async def no_socket(*args, **kwargs):
        raise aiohttp.ClientOSError(code, "Too many open files")

    monkeypatch.setattr(balancer._sessions, "send", no_socket)
    with pytest.raises(CallError) as refused:
        asyncio.run(balancer.post("/classify", {"input": [1]}, timeout_s=5))
    assert not refused.value.retryable and "ulimit -n" in str(refused.value)
    assert balancer.healthy[URL]  # not marked down
    asyncio.run(balancer.close())


def test_a_connection_refused_is_still_the_replicas(monkeypatch):
    balancer = ReplicaBalancer([URL])

    async def refused(*args, **kwargs):
        raise aiohttp.ClientOSError(errno.ECONNREFUSED, "Connection refused")

    monkeypatch.setattr(balancer._sessions, "send", refused)
    with pytest.raises(TransientError):
        asyncio.run(balancer.post("/classify", {"input": [1]}, timeout_s=5))
    asyncio.run(balancer.close())
