"""A shell whose HTTP_PROXY / HTTPS_PROXY / ALL_PROXY name a proxy that cannot reach back to this machine, NO_PROXY
empty (corporate and cluster machines): rlrm's loopback traffic stays direct, in its own process, in the processes it
launches (the SGLang router's health checks of its replica) and in the clients a custom reward calls its
`reward_router_address` with (requests, httpx, the openai SDK), while a hosted judge (an https host name) goes
through the proxy, as the user's other tools do. Before: the router never became ready (its checks went to the proxy: the run waited 180 s),
every custom reward call was the proxy's 502 ("Fix the reward function"), and a hosted judge reachable only through
the proxy was never reached."""

from __future__ import annotations

import asyncio

import pytest
from dead_proxy import DeadProxy, set_proxy_variables
from standin_openai_api import StandinOpenAIAPI

from rlrm.call_errors import CallError
from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.metered import MeteredBalancer
from rlrm.engine.rewards.model_proxy import ModelProxy
from rlrm.launch.client.balancer import ReplicaBalancer

KEY = "sk-standin-proxy"


@pytest.fixture()
def dead_proxy(monkeypatch):
    with DeadProxy() as proxy:
        set_proxy_variables(monkeypatch, proxy)
        yield proxy


@pytest.mark.parametrize("client", ["requests", "httpx", "openai"])
def test_the_reward_address_is_called_direct_by_the_clients_users_write(dead_proxy, client):
    async def scenario(api):
        balancer = ReplicaBalancer([api.base_url.removesuffix("/v1")], api_key=KEY)
        forwarder = ModelProxy(MeteredBalancer(balancer, RewardConfig()), timeout_s=20)
        try:
            async with forwarder.lease() as address:
                url = f"http://{address}/v1/models"
                if client == "requests":
                    import requests

                    return await asyncio.to_thread(lambda: requests.get(url, timeout=10).status_code)
                if client == "httpx":
                    import httpx

                    async with httpx.AsyncClient(timeout=10) as c:
                        return (await c.get(url)).status_code
                import openai

                sdk = openai.AsyncOpenAI(base_url=f"http://{address}/v1", api_key="unused", max_retries=0)
                try:
                    return 200 if [m.id async for m in sdk.models.list()] else 0
                finally:
                    await sdk.close()
        finally:
            await forwarder.close()
            await balancer.close()

    with StandinOpenAIAPI(KEY, rpm=60000) as api:
        status = asyncio.run(scenario(api))
    assert (status, dead_proxy.seen) == (200, [])


def test_a_hosted_judge_is_reached_through_the_shells_proxy(dead_proxy):
    async def scenario():
        balancer = ReplicaBalancer(["https://judge-api.example.test"], api_key=KEY)  # a name only the proxy resolves
        try:
            await balancer.post("/v1/chat/completions", {"model": "m", "messages": []}, timeout_s=10)
        except CallError:
            pass  # the proxy's 502
        finally:
            await balancer.close()

    asyncio.run(scenario())
    assert dead_proxy.seen and dead_proxy.seen[0].startswith("CONNECT judge-api.example.test:443")


def test_the_router_checks_its_replica_direct(dead_proxy, tiny_genrm_server):
    from rlrm.launch.common import http
    from rlrm.launch.fleet.router import sglang_router, sglang_router_available, wait_for_workers

    if not sglang_router_available():
        pytest.skip("sglang-router not installed (extra: router)")
    with sglang_router([tiny_genrm_server.url], start_timeout_s=60) as router:
        wait_for_workers(router, 1, timeout_s=60)
        body = {"text": "1 + 1 =", "sampling_params": {"max_new_tokens": 2}}
        reply = http.post(router.url + "/generate", body, timeout_s=30)
    assert (reply.status, dead_proxy.seen) == (200, [])
