"""API keys stay secret: never on a server's command line or in config.yaml, compared in constant
time, `Bearer` in any case; a profile names an environment variable instead of holding the key."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.config.loader import load_profile
from rlrm.config.reward import RewardConfig
from rlrm.engine.reward_service import RewardService
from rlrm.engine.trainer import start_run
from rlrm.errors import ConfigError
from rlrm.launch.common.auth import authorized

KEY = "k3y-only-the-owner-may-read"


def test_authorized_accepts_bearer_in_any_case_and_only_the_key():
    assert authorized(f"Bearer {KEY}".encode(), KEY)
    assert authorized(f"bearer {KEY}".encode(), KEY) and authorized(f"BEARER  {KEY} ".encode(), KEY)
    assert not authorized(f"Bearer {KEY}x".encode(), KEY) and not authorized(KEY.encode(), KEY)
    assert not authorized(f"Basic {KEY}".encode(), KEY) and not authorized(b"", KEY)


def test_replicas_get_the_key_by_environment_not_command_line(random_disrm_path, monkeypatch):
    monkeypatch.setenv("RLRM_TEST_REWARD_KEY", KEY)
    cfg = RewardConfig(
        kind="disrm",
        server={"model": str(random_disrm_path), "api_key_env": "RLRM_TEST_REWARD_KEY", "request_timeout_s": 20},
        attempt_timeout_s=20,
    )
    body = {"input": [[5, 6, 7]], "use_activation": False}

    async def scenario():
        service = RewardService(cfg)
        await service.start()
        try:
            (server,) = service.pool.servers
            cmdline = Path(f"/proc/{server.proc.pid}/cmdline").read_bytes().replace(b"\0", b" ")
            via_balancer = await service.balancer.post("/classify", body, 20)  # the balancer sends the key
            async with httpx.AsyncClient(base_url=server.url) as client:
                codes = [
                    (await client.post("/classify", json=body, headers=headers)).status_code
                    for headers in (
                        {},
                        {"Authorization": "Bearer wrong"},
                        {"Authorization": f"bearer {KEY}"},
                        {"Authorization": f"Bearer {KEY}"},
                    )
                ]
            return cmdline, via_balancer, codes
        finally:
            await service.close()

    cmdline, via_balancer, codes = asyncio.run(scenario())
    assert KEY.encode() not in cmdline and b"--api-key-env RLRM_API_KEY" in cmdline
    assert len(via_balancer["data"]) == 1
    assert codes == [401, 401, 200, 200]


def test_an_unset_key_variable_is_one_clear_error(random_disrm_path, monkeypatch):
    monkeypatch.delenv("RLRM_TEST_UNSET_KEY", raising=False)
    cfg = RewardConfig(kind="disrm", server={"model": str(random_disrm_path), "api_key_env": "RLRM_TEST_UNSET_KEY"})
    service = RewardService(cfg)
    with pytest.raises(
        ConfigError,
        match="reward.server.api_key_env names the environment variable RLRM_TEST_UNSET_KEY, which is not set",
    ):
        asyncio.run(service.start())
    assert service.pool is None  # refused before any server started


def test_config_yaml_holds_a_reference_never_the_key(tmp_path):
    profile = load_profile("tiny-disrm", ["reward.server.api_key_env=RLRM_TEST_REWARD_KEY"])
    text = (start_run(profile, tmp_path / "run") / "config.yaml").read_text()
    assert "api_key_env: RLRM_TEST_REWARD_KEY" in text
    with pytest.raises(ConfigError) as refused:  # the key itself has no place in a profile
        load_profile("tiny-disrm", [f"reward.server.api_key={KEY}"])
    assert "reward.server.api_key_env" in str(refused.value) and KEY not in str(refused.value)


def test_launch_server_reads_the_key_from_a_named_variable(monkeypatch):
    monkeypatch.delenv("RLRM_TEST_UNSET_KEY", raising=False)
    result = CliRunner().invoke(
        app, ["launch", "server", "--model", "tiny:policy", "--api-key-env", "RLRM_TEST_UNSET_KEY"]
    )
    assert result.exit_code == 1
    assert result.output.strip() == (
        "error: --api-key-env names the environment variable RLRM_TEST_UNSET_KEY, which is not set (or empty) here; "
        "export RLRM_TEST_UNSET_KEY=<key>"
    )
