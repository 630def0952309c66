"""A hand-started server (rlrm's embedded one, under its own --served-model-name or its default) given as `addresses` with a
served_model_name it does not serve: refused at start in one line naming both names, for the judge and the policy;
the name it serves passes."""

from __future__ import annotations

import asyncio
import re

import pytest

from rlrm.launch.fleet.health import check_servers
from rlrm.launch.fleet.process import ServerProcess, ServerStartError, embedded_server_argv


@pytest.fixture(scope="module")
def judge(tiny_genrm_server, tiny_policy_path):
    """The session's judge (tests/integration/conftest.py), only asked: it serves under its default name, the
    model's path (the policy below shows --served-model-name)."""
    return tiny_genrm_server, str(tiny_policy_path)


@pytest.fixture(scope="module")
def policy(tiny_policy_path):
    extra = ["--threads", "1", "--served-model-name", "policy-a"]
    with ServerProcess.on_free_port(
        lambda port: embedded_server_argv(str(tiny_policy_path), "policy", port, extra=extra)
    ) as server:
        yield server


def _check(url: str, role: str, name: str | None, section: str) -> str | None:
    try:
        asyncio.run(check_servers([url], role, None, name, 30, what=f"{section}.addresses", served_model_name=name))
    except ServerStartError as exc:
        return str(exc)
    return None


def test_a_wrong_served_model_name_for_a_judge_is_one_line_naming_both(judge):
    judge, name = judge
    message = _check(judge.url, "genrm", "judge-b", "reward.server")
    assert message is not None and "\n" not in message
    assert message.startswith(f"reward.server.addresses[0] {judge.url} cannot serve the genrm reward: ")
    assert f"it serves '{name}', not reward.server.served_model_name 'judge-b'" in message, message
    assert _check(judge.url, "genrm", name, "reward.server") is None


def test_a_wrong_served_model_name_for_the_policy_is_one_line_naming_both(policy):
    message = _check(policy.url, "policy", "policy-b", "rollout.server")
    assert message is not None and "\n" not in message
    assert "it serves 'policy-a', not rollout.server.served_model_name 'policy-b'" in message, message
    assert _check(policy.url, "policy", "policy-a", "rollout.server") is None


def test_through_the_reward_service_the_profile_key_is_checked(judge):
    judge, name = judge
    from rlrm.config.reward import RewardConfig
    from rlrm.engine.reward_service import RewardService

    cfg = RewardConfig.model_validate(
        {"kind": "genrm", "server": {"model": "tiny:judge", "addresses": [judge.url], "served_model_name": "judge-b"}}
    )
    with pytest.raises(
        ServerStartError, match=rf"it serves '{re.escape(name)}', not reward.server.served_model_name 'judge-b'"
    ):
        asyncio.run(RewardService(cfg).start())
