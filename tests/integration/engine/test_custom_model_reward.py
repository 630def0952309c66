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

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
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
    return run_batch(cfg, samples(n))


def run_batch(cfg: RewardConfig, batch: list):
    async def scenario():
        service = RewardService(cfg)
        await service.start()
        try:
            return await service.loop.score_all(batch), service.loop.take_metrics()
        finally:
            await service.close()

    return asyncio.run(scenario())


def test_a_custom_function_calls_the_model_and_each_call_is_counted(tmp_path, capfd):
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
    # the path the servers do not serve is named once, not once per call
    assert capfd.readouterr().err.count("the reward function called POST /classify, which the reward servers") == 1
    # judge tokens from the answers' usage (the stand-in's totals include the readiness probe's)
    assert 0 < metrics["reward/judge_completion_tokens"] < usage["completion_tokens"]


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


IGNORES_THE_ADDRESS = """
def compute_score(data_source, solution_str, ground_truth, extra_info, reward_router_address=None):
    return float(solution_str.endswith(ground_truth))
"""


def test_a_function_that_ignores_the_address_scores_alone(tmp_path):
    path = tmp_path / "rule_only.py"
    path.write_text(IGNORES_THE_ADDRESS)
    with StandinOpenAIAPI(KEY, rpm=6000) as api:
        cfg = RewardConfig.model_validate(
            {
                "kind": "custom",
                "custom": {"path": str(path)},
                "server": {"model": api.model, "addresses": [api.base_url], "api_key_env": "STANDIN_KEY"},
            }
        )
        results, metrics = run(cfg, 4)
        judged = len(api.accepted) - 1  # the readiness probe is the one the stand-in let in
    assert [r.score for r in results] == [1.0, 0.0, 1.0, 0.0] and judged == 0
    assert metrics["reward/model_calls"] == 0 and metrics["reward/failures"] == 0
    assert all("model_requests" not in r.extra for r in results)


def test_a_functions_calls_wait_out_the_apis_429s_and_never_see_one(tmp_path):
    # without reward.limits the stand-in refuses some of the function's judge calls: the forwarder waits each out
    # as the API says and sends it again, so the function sees only answers, and the 429s are counted apart
    path = tmp_path / "judge_some.py"
    path.write_text(FUNCTION)
    with StandinOpenAIAPI(KEY, rpm=300, burst=2) as api:
        cfg = RewardConfig.model_validate(
            {
                "kind": "custom",
                "custom": {"path": str(path)},
                "server": {"model": api.model, "addresses": [api.base_url], "api_key_env": "STANDIN_KEY"},
                "max_failure_rate": 1.0,
            }
        )
        results, metrics = run(cfg, 12)
        throttled = len(api.throttled)
    assert throttled and metrics["reward/rate_limited"] == throttled
    assert metrics["reward/failures"] == 0 and metrics["reward/defaulted"] == 0
    assert [r.score for r in results] == [1.0, 0.0] * 6
    assert all(c["status"] != 429 for r in results for c in r.extra["model_requests"])


SLOW_AFTER_CALLS = """
import asyncio
import aiohttp

async def compute_score(data_source, solution_str, ground_truth, extra_info, reward_router_address=None):
    async with aiohttp.ClientSession() as session:
        for _ in range(2):
            async with session.get(f"http://{reward_router_address}/v1/models") as resp:
                await resp.read()
    await asyncio.sleep(60)   # then never returns within reward.attempt_timeout_s
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
                "attempt_timeout_s": 3.0,  # room for the two calls on a loaded machine; the sleep is 60 s
                "max_retries": 1,
                "max_failure_rate": 1.0,
            }
        )
        results, metrics = run(cfg, 2)
    assert metrics["reward/timeouts"] == 4  # 2 samples x 2 attempts, each cut off at its deadline
    assert metrics["reward/model_calls"] == 2 * 2 * 2  # the calls those attempts made are not lost with them


EVERY_PATH = """
import aiohttp

CALLS = {
    "genrm": [
        ("GET", "/v1/models", None),
        # OpenAI's API (and the SGLang router in front of the servers) wants the model named: read from /v1/models
        ("POST", "/v1/completions", {"prompt": "1 + 1 =", "max_tokens": 2, "temperature": 0, "model": None}),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "1?"}], "max_tokens": 2, "model": None}),
        ("POST", "/generate", {"text": "1 + 1 =", "sampling_params": {"max_new_tokens": 2, "temperature": 0}}),
    ],
    "disrm": [("GET", "/v1/models", None), ("POST", "/classify", {"input": "1 + 1 = 2"})],
}


async def compute_score(data_source, solution_str, ground_truth, extra_info, reward_router_address=None):
    statuses, model = [], None
    async with aiohttp.ClientSession() as session:   # no key: the forwarder adds the servers' own
        for method, path, body in CALLS[extra_info["role"]]:
            if body and "model" in body:
                body = {**body, "model": model}
            async with session.request(method, f"http://{reward_router_address}{path}", json=body) as resp:
                answer = await resp.json()  # with its check: the answer must say application/json
                statuses.append(resp.status if resp.status == 200 else (resp.status, answer))
            if path == "/v1/models":
                model = answer["data"][0]["id"]
    return {"score": float(all(s == 200 for s in statuses)), "statuses": statuses}
"""


@pytest.mark.parametrize("role", ["genrm", "disrm"])
def test_the_address_answers_every_path_the_launched_servers_serve(tmp_path, role, request):
    # rlrm launches the reward servers (with a key of the run's own) for a custom function, as for genrm/disrm
    model = request.getfixturevalue("tiny_policy_path" if role == "genrm" else "random_disrm_path")
    path = tmp_path / "every_path.py"
    path.write_text(EVERY_PATH)
    cfg = RewardConfig.model_validate(
        {
            "kind": "custom",
            "custom": {"path": str(path), "model_role": role},
            "server": {"model": str(model), "threads": 1, "request_timeout_s": 120},
            "attempt_timeout_s": 120,
        }
    )
    batch = samples(2)
    for sample in batch:
        sample.extra_info["role"] = role
    results, metrics = run_batch(cfg, batch)
    calls = 4 if role == "genrm" else 2
    assert [r.extra.get("statuses") for r in results] == [[200] * calls] * 2, [r.extra for r in results]
    assert metrics["reward/model_calls"] == 2 * calls and metrics["reward/model_not_found"] == 0


TOKENIZER_FUNCTION = """
def compute_score(data_source, solution_str, ground_truth, extra_info, reward_model_tokenizer=None):
    return float(len(reward_model_tokenizer.encode(solution_str)) > 0)
"""


def test_a_tokenizer_the_reward_server_does_not_use_is_refused_at_start(tmp_path, tiny_policy_path, tiny_genrm_server):
    from transformers import AutoTokenizer

    from rlrm.errors import ConfigError

    other = tmp_path / "bigger-tokenizer"
    tokenizer = AutoTokenizer.from_pretrained(tiny_policy_path)
    tokenizer.add_tokens(["<extra-1>", "<extra-2>"])
    tokenizer.save_pretrained(other)
    path = tmp_path / "uses_tokenizer.py"
    path.write_text(TOKENIZER_FUNCTION)
    server = tiny_genrm_server  # the session's (tests/integration/conftest.py)

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
