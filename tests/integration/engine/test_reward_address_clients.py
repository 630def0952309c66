"""The address rlrm hands a custom reward (`reward_router_address`), called with the HTTP clients users' functions
use: aiohttp (whose `json()` refuses an answer not typed JSON), httpx, and the openai SDK. Every JSON answer, errors
included, must say `application/json`: behind the SGLang router, `/v1/models` came back as `text/plain` and a 404
with no body, and a verl-style function failed on every sample.

The upstreams are real processes on free loopback ports: the embedded server (genrm and disrm), the SGLang router in
front of the genrm one (as rlrm launches a generative judge), and a stand-in for a hosted API (tests/fixtures).
The embedded servers are also called directly, as `rlrm launch server` serves them.

    PYTHONPATH=$PWD python -m pytest -q tests/integration/engine/test_reward_address_clients.py
"""

from __future__ import annotations

import asyncio
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.metered import MeteredBalancer
from rlrm.engine.rewards.model_proxy import ModelProxy
from rlrm.launch.client.balancer import ReplicaBalancer
from rlrm.launch.fleet.router import sglang_router, sglang_router_available

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
from standin_openai_api import StandinOpenAIAPI  # noqa: E402

KEY = "sk-standin-clients"
CHAT = {"messages": [{"role": "user", "content": "1 + 1 = ?"}], "max_tokens": 2, "temperature": 0}
GENERATIVE = [
    ("GET", "/v1/models", None),
    ("POST", "/v1/chat/completions", CHAT),
    ("POST", "/v1/completions", {"prompt": "1 + 1 =", "max_tokens": 2, "temperature": 0}),
    ("POST", "/generate", {"text": "1 + 1 =", "sampling_params": {"max_new_tokens": 2, "temperature": 0}}),
]
ENDPOINTS = {  # the JSON endpoints each upstream serves (a body's "model", when it has one, comes from /v1/models)
    "router": GENERATIVE,
    "genrm": GENERATIVE,
    "genrm-direct": GENERATIVE,
    "hosted": GENERATIVE[:2],
    "disrm": [("GET", "/v1/models", None), ("POST", "/classify", {"input": "1 + 1 = 2"})],
    "disrm-direct": [("GET", "/v1/models", None), ("POST", "/classify", {"input": "1 + 1 = 2"})],
}
BAD_BODY = {  # a request each upstream refuses with 400 (the hosted stand-in is not asked: it judges no bodies)
    "router": ("POST", "/v1/chat/completions", {"messages": "not a list"}),
    "genrm": ("POST", "/v1/chat/completions", {"messages": "not a list"}),
    "genrm-direct": ("POST", "/v1/chat/completions", {"messages": "not a list"}),
    "disrm": ("POST", "/classify", {"input": []}),
    "disrm-direct": ("POST", "/classify", {"input": []}),
}
OPENAI_SHAPED = ["router", "genrm", "genrm-direct", "hosted"]


@pytest.fixture(scope="module")
def genrm(tiny_genrm_server):
    return tiny_genrm_server  # the session's (tests/integration/conftest.py)


@pytest.fixture(scope="module")
def disrm(random_disrm_server):
    return random_disrm_server


@pytest.fixture(scope="module")
def router(genrm):
    if not sglang_router_available():
        pytest.skip("sglang-router not installed (extra: router)")
    with sglang_router([genrm.url]) as r:
        _wait_for_a_model(r.url)
        yield r


def _wait_for_a_model(url: str, timeout_s: float = 60.0) -> None:
    """The router answers /health before its worker is registered; its /v1/models lists the model only after."""
    import time

    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/v1/models", timeout=5).json().get("data"):
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"the router at {url} listed no model within {timeout_s:g} s")


@pytest.fixture(scope="module")
def hosted():
    with StandinOpenAIAPI(KEY, rpm=60000) as api:
        yield api


@pytest.fixture()
def upstream(request):
    """(the URL the balancer sends to, its key, whether the test calls it through the forwarder)"""
    name = request.param
    if name == "hosted":
        return request.getfixturevalue("hosted").base_url.removesuffix("/v1"), KEY, True
    server = request.getfixturevalue(name.removesuffix("-direct"))
    return server.url, None, not name.endswith("-direct")


@asynccontextmanager
async def address(upstream):
    """The base URL a function's client calls: a leased forwarder port (as `reward_router_address`), or the server."""
    url, key, forwarded = upstream
    if not forwarded:
        yield url
        return
    balancer = ReplicaBalancer([url], api_key=key)
    proxy = ModelProxy(MeteredBalancer(balancer, RewardConfig()), timeout_s=60)
    try:
        async with proxy.lease() as host_port:
            yield f"http://{host_port}"  # verl's functions add the scheme to the host:port they are given
    finally:
        await proxy.close()
        await balancer.close()


def cases(names):
    return pytest.mark.parametrize("upstream", names, indirect=True)


@cases(list(ENDPOINTS))
def test_aiohttp_reads_every_answer_with_its_content_type_check(upstream, request):
    import aiohttp

    name = request.node.callspec.params["upstream"]

    async def scenario():
        answers, model = [], None
        async with address(upstream) as base, aiohttp.ClientSession() as session:
            for method, path, body in ENDPOINTS[name]:
                body = {**body, "model": model} if body is not None and model else body
                async with session.request(method, base + path, json=body) as resp:
                    answer = await resp.json()  # raises ContentTypeError unless the answer says application/json
                    answers.append((path, resp.status))
                if path == "/v1/models":
                    model = answer["data"][0]["id"]
            if name in BAD_BODY:
                method, path, body = BAD_BODY[name]
                async with session.request(method, base + path, json=body) as resp:
                    answers.append((path, resp.status, bool((await resp.json())["error"]["message"])))
            async with session.post(base + "/v1/no-such-path", json={}) as resp:
                answers.append(("/v1/no-such-path", resp.status, bool((await resp.json())["error"]["message"])))
        return answers

    expected = [(path, 200) for _, path, _ in ENDPOINTS[name]]
    if name in BAD_BODY:
        expected.append((BAD_BODY[name][1], 400, True))
    expected.append(("/v1/no-such-path", 404, True))
    assert asyncio.run(scenario()) == expected


@cases(list(ENDPOINTS))
def test_httpx_sees_application_json_on_every_answer(upstream, request):
    import httpx

    name = request.node.callspec.params["upstream"]

    async def scenario():
        types, model = [], None
        async with address(upstream) as base, httpx.AsyncClient(base_url=base, timeout=60) as client:
            calls = ENDPOINTS[name] + ([BAD_BODY[name]] if name in BAD_BODY else []) + [("POST", "/v1/x", {})]
            for method, path, body in calls:
                body = {**body, "model": model} if body is not None and model else body
                r = await client.request(method, path, json=body)
                types.append((path, r.status_code, r.headers["content-type"].split(";")[0]))
                if path == "/v1/models":
                    model = r.json()["data"][0]["id"]
                else:
                    r.json()
        return types

    types = asyncio.run(scenario())
    assert [t for t in types if t[2] != "application/json"] == [], types
    assert [status for *_, status, _ in types[: len(ENDPOINTS[name])]] == [200] * len(ENDPOINTS[name])


@cases(OPENAI_SHAPED)
def test_the_openai_sdk_lists_models_and_chats_through_the_address(upstream, request):
    import openai

    name = request.node.callspec.params["upstream"]

    async def scenario():
        async with address(upstream) as base:
            client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
            try:
                models = [m.id async for m in client.models.list()]
                chat = await client.chat.completions.create(model=models[0], **CHAT)
                text = None
                if name != "hosted":  # the stand-in serves chat only
                    done = await client.completions.create(model=models[0], prompt="1 + 1 =", max_tokens=2)
                    text = done.choices[0].text
                with pytest.raises(openai.NotFoundError) as missing:
                    await client.post("/no-such-path", body={}, cast_to=object)
            finally:
                await client.close()
        return models, chat, text, missing.value

    models, chat, text, missing = asyncio.run(scenario())
    assert len(models) == 1 and models[0]
    assert isinstance(chat.choices[0].message.content, str) and chat.choices[0].finish_reason in ("stop", "length")
    assert name == "hosted" or isinstance(text, str)
    assert missing.status_code == 404 and "no-such-path" in missing.message


def test_a_completions_prompt_of_token_ids_is_answered_behind_the_router(router, genrm):
    # sglang-router 0.3.2 takes only text as a completions prompt (422 "StringOrArray"); the replicas, vLLM and
    # OpenAI take token ids, and a verl-style function that tokenizes its judge prompt sends them: the forwarder
    # sends such a request to a replica behind the router
    import openai

    async def scenario():
        balancer = ReplicaBalancer([router.url], behind_router=[genrm.url])
        proxy = ModelProxy(MeteredBalancer(balancer, RewardConfig()), timeout_s=60)
        try:
            async with proxy.lease() as host_port:
                client = openai.AsyncOpenAI(base_url=f"http://{host_port}/v1", api_key="unused", max_retries=0)
                try:
                    model = (await client.models.list()).data[0].id
                    ids = await client.completions.create(model=model, prompt=[16, 488], max_tokens=2, temperature=0)
                    text = await client.completions.create(model=model, prompt="1 +", max_tokens=2, temperature=0)
                finally:
                    await client.close()
        finally:
            await proxy.close()
            await balancer.close()
        return ids, text

    ids, text = asyncio.run(scenario())
    assert ids.usage.prompt_tokens == 2 and isinstance(ids.choices[0].text, str)
    assert isinstance(text.choices[0].text, str)  # text still goes through the router


@cases(["genrm"])
def test_a_batch_and_a_wrong_typed_field_get_the_servers_own_answer(upstream):
    # SGLang's batch /generate (one sampling_params per prompt) and a max_tokens that is no number, through the
    # forwarder: the server answers each (the batch's answers; its 400 naming the field), not a bare 500 from rlrm
    import httpx

    batch = {"text": ["1 + 1 =", "2 + 2 ="], "sampling_params": [{"max_new_tokens": 2, "temperature": 0}] * 2}

    async def scenario():
        async with address(upstream) as base, httpx.AsyncClient(base_url=base, timeout=60) as client:
            model = (await client.get("/v1/models")).json()["data"][0]["id"]
            generated = await client.post("/generate", json=batch)
            refused = await client.post("/v1/chat/completions", json={**CHAT, "model": model, "max_tokens": "many"})
            return generated, refused

    generated, refused = asyncio.run(scenario())
    assert generated.status_code == 200 and len(generated.json()) == 2, generated.text[:200]
    assert refused.status_code == 400 and "max_tokens" in refused.json()["error"]["message"], refused.text[:200]


@cases(["router", "genrm", "genrm-direct"])
def test_health_answers_200_as_plain_text(upstream):
    import httpx

    async def scenario():
        async with address(upstream) as base, httpx.AsyncClient(base_url=base) as client:
            return await client.get("/health")

    r = asyncio.run(scenario())
    assert r.status_code == 200 and r.text.lower() == "ok" and r.headers["content-type"].startswith("text/plain")


VERL_STYLE = """
import aiohttp

async def compute_score(data_source, solution_str, ground_truth, extra_info, reward_router_address=None):
    base = f"http://{reward_router_address}"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base}/v1/models") as resp:
            model = (await resp.json())["data"][0]["id"]
        payload = {
            "model": model,
            "messages": [{"role": "user", "content": f"Answer: {solution_str}\\nReference: {ground_truth}\\nScore 0-10:"}],
            "max_tokens": 4,
            "temperature": 0,
        }
        async with session.post(f"{base}/v1/chat/completions", json=payload) as resp:
            verdict = (await resp.json())["choices"][0]["message"]["content"]
    return {"score": float(ground_truth in solution_str), "verdict": verdict}
"""


def test_a_verl_style_async_function_scores_every_sample_in_a_run(tmp_path):
    # as verl's reward-loop docs write one: async, aiohttp, the model's name from /v1/models, then the judge; rlrm
    # launches the tiny judge (behind the SGLang router where it is installed) and hands the function the address
    from small_run import SMALL_RUN

    from rlrm.config.loader import load_profile
    from rlrm.engine.metrics.metrics_file import read_metrics
    from rlrm.engine.trainer import start_run, train

    path = tmp_path / "verl_style.py"
    path.write_text(VERL_STYLE)
    overrides = ["reward.server.model=tiny:policy", "trainer.total_steps=1"]
    profile = load_profile("tiny-fapo", [*SMALL_RUN, *overrides, f"reward.custom.path={path}"])
    run_dir = start_run(profile, tmp_path / "run")
    assert train(run_dir).last_step == 1
    (row,) = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] > 0]
    samples = 4 * 2  # data.train_batch_size x rollout.n (SMALL_RUN)
    assert row["reward/failures"] == 0 and row["reward/defaulted"] == 0
    assert row["reward/model_calls"] == 2 * samples and row["reward/model_not_found"] == 0


def test_a_streamed_call_through_the_address_is_counted_and_its_timeout_says_it_was_a_stream():
    """`stream=true` through the forwarder: the SDK reads the chunks, and the call's `usage` (sent in the last
    chunk when `stream_options.include_usage` asks) is counted; it was dropped (the body is no JSON object), so
    the judge's tokens read 0 and the tpm limiter never learnt them. A stream is passed on once complete: one cut
    at reward.server.request_timeout_s says so, where it read as a server that never answered."""
    import openai

    from rlrm.engine.rewards.ledger import ledger_scope

    async def scenario(api, timeout_s):
        balancer = ReplicaBalancer([api.base_url.removesuffix("/v1")], api_key=KEY)
        proxy = ModelProxy(MeteredBalancer(balancer, RewardConfig()), timeout_s=timeout_s)
        try:
            with ledger_scope() as ledger:
                async with proxy.lease() as host_port:
                    client = openai.AsyncOpenAI(base_url=f"http://{host_port}/v1", api_key="unused", max_retries=0)
                    try:
                        stream = await client.chat.completions.create(
                            model=api.model, stream=True, stream_options={"include_usage": True}, **CHAT
                        )
                        chunks = [chunk async for chunk in stream]
                    except openai.APIError as exc:
                        chunks = exc
                    finally:
                        await client.close()
        finally:
            await proxy.close()
            await balancer.close()
        return chunks, ledger

    with StandinOpenAIAPI(KEY, rpm=60000) as api:
        chunks, ledger = asyncio.run(scenario(api, timeout_s=60))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Checked against the reference. Score: 0"
    assert chunks[-1].usage.completion_tokens == 6 and ledger.model_calls == 1
    assert (ledger.prompt_tokens, ledger.completion_tokens) == (chunks[-1].usage.prompt_tokens, 6)

    with StandinOpenAIAPI(KEY, rpm=60000, stream_gap_s=0.3) as api:  # 6 chunks, 1.8 s, against 1 s
        error, _ = asyncio.run(scenario(api, timeout_s=1.0))
    assert isinstance(error, openai.InternalServerError) and error.status_code == 502
    assert "did not finish its stream within 1 s (reward.server.request_timeout_s): the forwarder passes" in str(error)


def test_a_streamed_non_ascii_answer_reads_the_same_through_the_address_as_from_the_server():
    """vLLM and SGLang type a stream `text/event-stream; charset=utf-8`; the address passed `text/event-stream` on,
    and `requests` decodes text/* without a charset as ISO-8859-1: a Chinese answer read with `r.text` was mojibake
    through the address, right from the server."""
    import requests
    from aiohttp import web

    stream = 'data: {"choices":[{"delta":{"content":"答案是 42。Score: 8"}}]}\n\ndata: [DONE]\n\n'

    async def chat(request):
        await request.read()
        return web.Response(body=stream.encode(), headers={"Content-Type": "text/event-stream; charset=utf-8"})

    async def scenario():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        balancer = ReplicaBalancer([url])
        proxy = ModelProxy(MeteredBalancer(balancer, RewardConfig()), timeout_s=30)
        body = {"messages": [{"role": "user", "content": "问题"}], "stream": True}
        loop = asyncio.get_running_loop()
        try:
            async with proxy.lease() as host_port:
                return await loop.run_in_executor(
                    None, lambda: requests.post(f"http://{host_port}/v1/chat/completions", json=body, timeout=30)
                )
        finally:
            await proxy.close()
            await balancer.close()
            await runner.cleanup()

    answer = asyncio.run(scenario())
    assert answer.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    assert answer.text == stream
