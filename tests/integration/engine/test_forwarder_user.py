"""The forwarder a custom reward function calls (rlrm/engine/rewards/model_proxy.py) puts the reward servers' key,
and a hosted judge's headers, on everything it sends on: only the run's own user may call it. Before, any local
user reached a run's keyed servers, or spent its hosted API key, through a leased port (ports stay open all run).
The other user here is a real one: a client process switched to `nobody` (needs root to switch)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

import pytest
from aiohttp import web

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.metered import MeteredBalancer
from rlrm.engine.rewards.model_proxy import ModelProxy, caller_is_this_user
from rlrm.launch.client.balancer import ReplicaBalancer

KEY = "run-secret-key"
CLIENT = (  # plain socket HTTP: the interpreter's lazily imported files may be readable by root only
    "import encodings.idna, os, socket, sys\n"
    "host, port = sys.argv[1].split(':')\n"
    "uid = int(sys.argv[2])\n"
    "if uid != os.getuid(): os.setgid(uid); os.setuid(uid)\n"
    "s = socket.create_connection((host, int(port)), timeout=30)\n"
    "s.sendall(b'POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\n'\n"
    "          b'Content-Length: 2\\r\\nConnection: close\\r\\n\\r\\n{}')\n"
    "print(s.recv(64).split()[1].decode())\n"
)


async def _status_of_callers(uids: list[int]) -> tuple[list[int], list[dict]]:
    seen: list[dict] = []

    async def upstream(request):  # a keyed judge, or a hosted API
        seen.append(dict(request.headers))
        return web.json_response({"choices": [{"message": {"content": "ok"}}]})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", upstream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    balancer = ReplicaBalancer([f"http://127.0.0.1:{port}"], api_key=KEY)
    proxy = ModelProxy(MeteredBalancer(balancer, RewardConfig()), timeout_s=10)
    statuses = []
    try:
        async with proxy.lease() as address:
            for uid in uids:
                done = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", CLIENT, address, str(uid),
                    stdout=subprocess.PIPE,
                )  # fmt: skip
                out, _ = await done.communicate()
                statuses.append(int(out))
    finally:
        await proxy.close()
        await balancer.close()
        await runner.cleanup()
    return statuses, seen


@pytest.mark.skipif(os.getuid() != 0, reason="switching a client to another user needs root")
def test_another_user_is_refused_and_the_runs_own_user_served():
    statuses, seen = asyncio.run(_status_of_callers([65534, os.getuid()]))  # nobody, then this user
    assert statuses == [403, 200]
    assert len(seen) == 1 and seen[0]["Authorization"] == f"Bearer {KEY}"  # only the run's own call went on


def test_the_owner_of_a_loopback_socket_is_read_from_the_kernels_table():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    try:
        assert caller_is_this_user(client.getsockname(), client.getpeername())
        assert not caller_is_this_user(("127.0.0.1", 1), client.getpeername())  # no such socket: nobody to vouch for
    finally:
        client.close()
        server.close()
