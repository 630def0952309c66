"""A custom reward function that calls the reward model itself, as verl's reward loop allows: it gets
`reward_router_address` (host:port, no scheme) and its calls through it reach the reward servers with their key,
are counted per sample (reward/model_calls, tokens, 404s), kept in the sample's extra info, and fall under the
run's rate limits. The servers here are a stand-in for a hosted OpenAI-compatible API (tests/fixtures)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.reward_service import RewardService

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from standin_openai_api import StandinOpenAIAPI  # noqa: E402
from test_hosted_judge import KEY, samples  # noqa: E402

FUNCTION = """
import aiohttp

async def compute_score(data_source, solution_str, ground_truth, extra_info, reward_router_address=None):
    assert "://" not in reward_router_address  # verl's form: host:port
    base = f"http://{reward_router_address}"
    async with aiohttp.ClientSession() as session:   # no key: the forwarder adds it
        async with session.get(base + "/v1/models") as resp:
            model = (await resp.json())["data"][0]["id"]
        if ground_truth in ("1", "3"):                # a path the servers do not serve: 404, counted
            async with session.post(base + "/classify", json={"input": "x"}) as resp:
                assert resp.status == 404
        if int(ground_truth) % 2:                     # the judge only for some samples
            return {"score": 0.0, "judged": False}
        body = {"model": model, "max_tokens": 8, "messages": [{"role": "user", "content":
                f"Answer: {solution_str}\\nReference answer: {ground_truth}"}]}
        async with session.post(base + "/v1/chat/completions", json=body) as resp:
            resp.raise_for_status()
            text = (await resp.json())["choices"][0]["message"]["content"]
    return {"score": float("Score: 10" in text), "judged": True}
"""


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("STANDIN_KEY", KEY)


def run(cfg: RewardConfig, n: int):
    async def scenario():
        service = RewardService(cfg)
        await service.start()
        try:
            return await service.loop.score_all(samples(n)), service.loop.take_metrics()
        finally:
            await service.close()

    return asyncio.run(scenario())


def test_a_custom_function_calls_the_model_and_each_call_is_counted(tmp_path):
    path = tmp_path / "judge_some.py"
    path.write_text(FUNCTION)
    with StandinOpenAIAPI(KEY, rpm=6000) as api:
        cfg = RewardConfig.model_validate(
            {
                "kind": "custom",
                "custom": {"path": str(path)},
                "server": {"model": api.model, "addresses": [api.base_url], "api_key_env": "STANDIN_KEY"},
            }
        )
        results, metrics = run(cfg, 8)
        usage = dict(api.usage)
    assert all(not r.extra.get("reward_failed") for r in results), [r.extra for r in results]
    judged = [r.extra["judged"] for r in results]
    assert judged == [True, False] * 4
    assert [r.score for r in results] == [1.0, 0.0] * 4
    # per sample: GET /v1/models, then /classify for samples 1 and 3, then the judge for the even ones
    assert [r.extra["model_calls"] for r in results] == [2, 2, 2, 2, 2, 1, 2, 1]
    assert metrics["reward/model_calls"] == 8 + 2 + 4
    assert metrics["reward/model_not_found"] == 2
    assert results[0].extra["model_requests"][1]["call"] == "POST /v1/chat/completions"
    assert results[1].extra["model_requests"][1]["status"] == 404
    # judge tokens from the answers' usage (the stand-in's totals include the readiness probe's)
    assert 0 < metrics["reward/judge_completion_tokens"] < usage["completion_tokens"]


def test_a_custom_reward_with_addresses_needs_the_model_named(tmp_path):
    path = tmp_path / "f.py"
    path.write_text("def compute_score(*a):\n    return 1.0\n")
    with pytest.raises(ValueError, match="needs reward.server.model"):
        RewardConfig.model_validate(
            {"kind": "custom", "custom": {"path": str(path)}, "server": {"addresses": ["http://127.0.0.1:9/v1"]}}
        )
    # without a model the function runs alone, as before: no servers, both optional arguments None
    assert RewardConfig.model_validate({"kind": "custom", "custom": {"path": str(path)}}).model_kind is None


def test_inspect_reward_shows_the_calls_a_custom_function_made(tmp_path, tiny_policy_path):
    from rlrm.config.loader import load_profile
    from rlrm.reward_checks.inspect import inspect_reward
    from rlrm.reward_checks.show import sample_rows

    path = tmp_path / "judge_some.py"
    path.write_text(FUNCTION)
    with StandinOpenAIAPI(KEY, rpm=6000) as api:
        profile = load_profile(
            "tiny-rule",
            [
                "reward.kind=custom",
                f"reward.custom.path={path}",
                f"reward.server.model={api.model}",
                f"reward.server.addresses={api.base_url}",
                "reward.server.api_key_env=STANDIN_KEY",
            ],
        )
        report = inspect_reward(profile, samples(2))
    calls = [[c["call"] for c in r["extra"]["model_requests"]] for r in report.records]
    assert calls == [["GET /v1/models", "POST /v1/chat/completions"], ["GET /v1/models", "POST /classify"]]
    assert "Score: 10" in report.records[0]["extra"]["model_requests"][1]["answer"]
    shown = dict(sample_rows(report.records[0]))["reward_extra_info"]
    assert "POST /v1/chat/completions" in shown


SLOW_AFTER_CALLS = """
import asyncio
import aiohttp

async def compute_score(data_source, solution_str, ground_truth, extra_info, reward_router_address=None):
    async with aiohttp.ClientSession() as session:
        for _ in range(2):
            async with session.get(f"http://{reward_router_address}/v1/models") as resp:
                await resp.read()
    await asyncio.sleep(60)   # then never returns within reward.timeout_s
"""


def test_calls_an_attempt_made_before_its_timeout_are_still_counted(tmp_path):
    path = tmp_path / "slow_after_calls.py"
    path.write_text(SLOW_AFTER_CALLS)
    with StandinOpenAIAPI(KEY, rpm=6000) as api:
        cfg = RewardConfig.model_validate(
            {
                "kind": "custom",
                "custom": {"path": str(path)},
                "server": {"model": api.model, "addresses": [api.base_url], "api_key_env": "STANDIN_KEY"},
                "timeout_s": 1.5,
                "max_retries": 1,
                "max_failure_rate": 1.0,
            }
        )
        results, metrics = run(cfg, 2)
    assert metrics["reward/timeouts"] == 4  # 2 samples x 2 attempts, each cut off at its deadline
    assert metrics["reward/model_calls"] == 2 * 2 * 2  # the calls those attempts made are not lost with them


TOKENIZER_FUNCTION = """
def compute_score(data_source, solution_str, ground_truth, extra_info, reward_model_tokenizer=None):
    return float(len(reward_model_tokenizer.encode(solution_str)) > 0)
"""


def test_a_tokenizer_the_reward_server_does_not_use_is_refused_at_start(tmp_path, tiny_policy_path):
    from transformers import AutoTokenizer

    from rlrm.errors import ConfigError
    from rlrm.launch.common.ports import free_port
    from rlrm.launch.fleet.process import ServerProcess, embedded_server_argv

    other = tmp_path / "bigger-tokenizer"
    tokenizer = AutoTokenizer.from_pretrained(tiny_policy_path)
    tokenizer.add_tokens(["<extra-1>", "<extra-2>"])
    tokenizer.save_pretrained(other)
    path = tmp_path / "uses_tokenizer.py"
    path.write_text(TOKENIZER_FUNCTION)
    with ServerProcess(
        embedded_server_argv(str(tiny_policy_path), "genrm", free_port(), extra=["--threads", "1"])
    ) as server:

        def service_with(model: str):
            cfg = RewardConfig.model_validate(
                {"kind": "custom", "custom": {"path": str(path)}, "server": {"model": model, "addresses": [server.url]}}
            )

            async def scenario():
                service = RewardService(cfg)
                await service.start()
                try:
                    return await service.loop.score_all(samples(2))
                finally:
                    await service.close()

            return asyncio.run(scenario())

        assert [r.score for r in service_with(str(tiny_policy_path))] == [1.0, 1.0]  # its own tokenizer: accepted
        with pytest.raises(
            ConfigError,
            match=rf"has {len(tokenizer)} tokens, but the reward server .* with a tokenizer of {len(tokenizer) - 2}",
        ):
            service_with(str(other))
