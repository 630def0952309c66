"""Running servers given in `reward.server.addresses` are checked before a run starts: healthy, and
serving the endpoint of their role; otherwise one line naming the address and what failed."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.reward_service import RewardService
from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.process import ServerProcess, ServerStartError, embedded_server_argv


@pytest.fixture(scope="module")
def judge_server(tiny_genrm_server):
    return tiny_genrm_server  # the session's (tests/integration/conftest.py)


@pytest.fixture(scope="module")
def disrm_server(random_disrm_path):
    env = {"RLRM_API_KEY": "k"}
    argv = embedded_server_argv(
        str(random_disrm_path), "disrm", free_port(), extra=["--threads", "1", "--api-key-env", "RLRM_API_KEY"]
    )
    with ServerProcess.movable(argv, env=env) as server:
        yield server


def _start(cfg: RewardConfig) -> RewardService:
    service = RewardService(cfg)

    async def scenario():
        await service.start()
        await service.close()

    asyncio.run(scenario())
    return service


def test_a_judge_given_as_a_disrm_is_refused_before_training(judge_server, random_disrm_path):
    cfg = RewardConfig(kind="disrm", server={"model": str(random_disrm_path), "addresses": [judge_server.url]})
    with pytest.raises(ServerStartError) as refused:
        _start(cfg)
    message = str(refused.value)
    assert message.startswith(
        f"reward.server.addresses[0] {judge_server.url} cannot serve the disrm reward: POST /classify answered 404"
    )
    assert "role 'genrm'" in message and "\n" not in message


def test_a_disrm_given_as_a_judge_is_refused(disrm_server, tiny_policy_path, monkeypatch):
    monkeypatch.setenv("RLRM_TEST_KEY", "k")
    cfg = RewardConfig(
        kind="genrm",
        server={
            "model": str(tiny_policy_path),
            "addresses": [disrm_server.url],
            "api_key_env": "RLRM_TEST_KEY",
            "router": "client",
        },
    )
    with pytest.raises(
        ServerStartError, match=r"cannot serve the genrm reward: POST /v1/chat/completions answered 404"
    ):
        _start(cfg)


def test_a_dead_port_is_refused_after_the_start_timeout(random_disrm_path):
    held = socket.socket()  # bound, never listening: no other test's server can take the port meanwhile
    held.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{held.getsockname()[1]}"
    cfg = RewardConfig(
        kind="disrm", server={"model": str(random_disrm_path), "addresses": [dead], "start_timeout_s": 1}
    )
    start = time.monotonic()
    with pytest.raises(ServerStartError) as refused:
        _start(cfg)
    assert str(refused.value).startswith(
        f"reward.server.addresses[0] {dead} cannot serve the disrm reward: ClientConnectorError"
    )
    assert "still after 1 s: reward.server.start_timeout_s" in str(refused.value)
    assert time.monotonic() - start < 60  # it gave up: no minutes of retries
    held.close()


def test_a_wrong_key_is_refused_and_the_right_one_scores(disrm_server, random_disrm_path, monkeypatch):
    monkeypatch.setenv("RLRM_TEST_KEY", "wrong")
    cfg = RewardConfig(
        kind="disrm",
        server={"model": str(random_disrm_path), "addresses": [disrm_server.url], "api_key_env": "RLRM_TEST_KEY"},
    )
    with pytest.raises(
        ServerStartError, match=r"answered 401 \(missing or wrong API key.*set reward.server.api_key_env"
    ):
        _start(cfg)
    monkeypatch.setenv("RLRM_TEST_KEY", "k")
    service = _start(cfg)
    assert service.balancer.urls == [disrm_server.url] and service.pool is None  # used as given, nothing launched
