"""The embedded server, as a real subprocess on a free port, through real HTTP clients (httpx, openai)."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys

import httpx
import pytest
import torch
from held_ports import reserved_port  # tests/fixtures/held_ports.py

from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.process import ServerProcess, embedded_server_argv

API_KEY = "s3cret"


@pytest.fixture(scope="module")
def genrm(tiny_policy_path):
    argv = embedded_server_argv(str(tiny_policy_path), "genrm", free_port(), extra=["--threads", "1"])
    with ServerProcess.movable(argv) as server:  # started again on a fresh port if another process took this one
        yield server


@pytest.fixture(scope="module")
def disrm(random_disrm_path):
    extra = ["--api-key", API_KEY, "--max-queue", "8", "--max-batch", "4", "--threads", "1"]
    argv = embedded_server_argv(str(random_disrm_path), "disrm", free_port(), extra=extra)
    with ServerProcess.movable(argv) as server:
        yield server


AUTH = {"Authorization": f"Bearer {API_KEY}"}
QUESTION = "Tom has 3 coins. He finds 4 more coins. How many coins does Tom have now?"


def test_health_and_models(genrm, tiny_policy_path):
    assert httpx.get(genrm.url + "/health").text == "ok"
    models = httpx.get(genrm.url + "/v1/models").json()
    assert models["data"][0]["role"] == "genrm" and models["data"][0]["max_model_len"] == 512
    # which weights answer, in which dtype: a run's reward contract reads them from running addresses (two judges
    # served under one name had one contract, and one's cached verdicts served the other)
    from rlrm.launch.common.model_digest import folder_digest

    assert models["data"][0]["weights"] == folder_digest(tiny_policy_path)
    assert models["data"][0]["dtype"] == "float32"


def test_a_weight_version_is_reported_by_generative_roles_only(genrm, disrm):
    # a generative replica serves a numbered policy version (0: the weights it started from); a classifier has none
    for server, headers, version in ((genrm, {}, "0"), (disrm, AUTH, None)):
        info = httpx.get(server.url + "/get_model_info", headers=headers).json()
        assert info["weight_version"] == version and info["is_generation"] is (version is not None)
        assert httpx.get(server.url + "/get_weight_version", headers=headers).json() == {"weight_version": version}


def test_openai_client_chat_and_completions(genrm):
    from openai import OpenAI

    client = OpenAI(base_url=genrm.url + "/v1", api_key="unused")
    chat = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": QUESTION}], max_tokens=12, temperature=0, seed=1
    )
    assert isinstance(chat.choices[0].message.content, str) and chat.choices[0].message.content
    assert chat.choices[0].finish_reason in ("stop", "length")
    assert chat.usage.completion_tokens <= 12 and chat.usage.prompt_tokens > 10
    assert chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens
    again = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": QUESTION}], max_tokens=12, temperature=0
    )
    assert again.choices[0].message.content == chat.choices[0].message.content  # greedy is deterministic
    many = client.completions.create(model="tiny", prompt="Mia has 5 pens.", max_tokens=6, n=3, seed=7)
    assert len(many.choices) == 3 and many.usage.completion_tokens <= 18
    assert [c.index for c in many.choices] == [0, 1, 2]


def test_an_assistant_turn_that_only_calls_a_tool_is_taken_as_the_sdk_sends_it(genrm):
    """`"content": null` with `tool_calls` (a judged agent trajectory) was a 400 here; vLLM and OpenAI take it."""
    from openai import BadRequestError, OpenAI

    client = OpenAI(base_url=genrm.url + "/v1", api_key="unused", max_retries=0)
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
    turns = [
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
    ]
    chat = client.chat.completions.create(model="tiny", messages=turns, max_tokens=2, temperature=0)
    assert isinstance(chat.choices[0].message.content, str) and chat.usage.prompt_tokens > 10
    # a wrong type names the field, not the union member pydantic tried (it read "messages.0.content.str")
    with pytest.raises(BadRequestError) as refused:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": 5}], max_tokens=2)
    assert refused.value.body["message"].startswith("messages.0.content: ")
    with pytest.raises(BadRequestError) as unknown:  # an unknown field's name is kept, whatever it reads
        client.chat.completions.create(model="tiny", messages=turns, max_tokens=2, extra_body={"Str": 1})
    assert unknown.value.body["message"].startswith("Str: ")


def test_generate_native_with_logprobs(genrm):
    out = httpx.post(
        genrm.url + "/generate",
        json={
            "text": "Mia has 5 pens.",
            "sampling_params": {"max_new_tokens": 5, "temperature": 0},
            "return_logprob": True,
        },
    ).json()
    meta = out["meta_info"]
    assert meta["completion_tokens"] == len(out["output_ids"]) == len(meta["output_token_logprobs"])
    assert all(lp <= 0 for lp, _, _ in meta["output_token_logprobs"])
    batch = httpx.post(
        genrm.url + "/generate", json={"input_ids": [[5, 6, 7], [8, 9]], "sampling_params": {"max_new_tokens": 3}}
    ).json()
    assert isinstance(batch, list) and len(batch) == 2


def test_a_stop_string_ends_the_ids_and_log_probs_where_it_ends_the_text(genrm, tiny_policy_path):
    # the text was cut before the stop string, but output_ids, their log-probs and completion_tokens went on to EOS
    from transformers import AutoTokenizer

    def generate(**sampling):
        body = {"text": "Mia has 5 pens.", "return_logprob": True}
        body["sampling_params"] = {"max_new_tokens": 12, "temperature": 0, **sampling}
        return httpx.post(genrm.url + "/generate", json=body).json()

    free = generate()["text"]
    assert len(free) >= 4
    stop = free[len(free) // 2 : len(free) // 2 + 2]
    out = generate(stop=stop)
    ids, meta = out["output_ids"], out["meta_info"]
    decode = AutoTokenizer.from_pretrained(str(tiny_policy_path)).decode
    assert out["text"] == free[: free.find(stop)] and meta["finish_reason"]["type"] == "stop"
    assert stop in decode(ids) and stop not in decode(ids[:-1])  # ends with the token that completes it
    assert meta["completion_tokens"] == len(ids) == len(meta["output_token_logprobs"])


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        ("/v1/chat/completions", b"{not json", "not valid JSON"),
        ("/v1/chat/completions", {"model": "x"}, "messages: Field required"),
        ("/v1/chat/completions", {"messages": []}, "at least 1 item"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "temprature": 1}, "temprature"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}, "max_tokens"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True}, "stream"),
        ("/v1/completions", {"prompt": ""}, "empty prompt"),
        ("/v1/completions", {"prompt": "hi " * 600, "max_tokens": 5}, "context"),
        ("/generate", {"sampling_params": {}}, "exactly one of"),
        # SGLang knobs the embedded server does not implement: refused, not answered as if unset
        ("/generate", {"input_ids": [5, 6], "sampling_params": {"min_p": 0.5}}, "sampling_params.min_p=0.5 is not"),
        (
            "/generate",
            {"input_ids": [[5], [6]], "sampling_params": [{}, {"ignore_eos": True}]},
            "sampling_params[1].ignore_eos=True is not",
        ),
        ("/classify", {"input": "x"}, "role 'genrm'"),
    ],
)
def test_bad_requests_get_4xx_with_a_message(genrm, path, body, needle):
    if isinstance(body, bytes):
        resp = httpx.post(genrm.url + path, content=body, headers={"content-type": "application/json"})
    else:
        resp = httpx.post(genrm.url + path, json=body)
    assert 400 <= resp.status_code < 500
    assert needle in resp.json()["error"]["message"]


def test_classify_returns_the_models_float32_logit(disrm, random_disrm_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    texts = [
        "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n#### 4<|im_end|>\n",
        "a longer input with more tokens in it",
    ]
    resp = httpx.post(
        disrm.url + "/classify", json={"model": "m", "input": texts, "use_activation": False}, headers=AUTH
    )
    assert resp.status_code == 200, resp.text
    served = [d["probs"][0] for d in resp.json()["data"]]
    tok = AutoTokenizer.from_pretrained(random_disrm_path)
    model = AutoModelForSequenceClassification.from_pretrained(random_disrm_path).eval()
    with torch.no_grad():
        direct = [model(**tok(t, return_tensors="pt")).logits[0, 0].item() for t in texts]
    assert served == pytest.approx(direct, abs=1e-5)  # padding in the batch changes nothing
    sig = httpx.post(disrm.url + "/classify", json={"input": texts[0]}, headers=AUTH).json()["data"][0]["probs"][0]
    assert sig == pytest.approx(1 / (1 + math.exp(-direct[0])), abs=1e-5)  # default: activation on
    ids = tok(texts[1])["input_ids"]
    by_ids = httpx.post(disrm.url + "/classify", json={"input": ids, "use_activation": False}, headers=AUTH).json()
    assert by_ids["data"][0]["probs"][0] == pytest.approx(direct[1], abs=1e-5)
    assert by_ids["usage"]["prompt_tokens"] == len(ids)


def test_classify_faults(disrm):
    post = lambda body, **kw: httpx.post(disrm.url + "/classify", json=body, **kw)  # noqa: E731
    assert post({"input": "x"}).status_code == 401  # no key
    assert httpx.get(disrm.url + "/health").status_code == 200  # health needs none
    assert post({"input": []}, headers=AUTH).status_code == 400
    long = post({"input": "word " * 200}, headers=AUTH)
    assert long.status_code == 400 and "more than the model's 64" in long.json()["error"]["message"]
    assert post({"input": "word " * 200, "truncate_prompt_tokens": 10}, headers=AUTH).status_code == 200
    over = post({"input": ["x"] * 9}, headers=AUTH)  # 9 items > max-queue 8: never admitted, so no retry-after
    assert over.status_code == 400 and "retry-after" not in over.headers
    assert over.json()["error"]["message"] == (
        "9 inputs in one request; this server takes at most 8 (--max-queue): split the request"
    )
    assert post({"input": "word " * 200, "truncate_prompt_tokens": -1}, headers=AUTH).status_code == 200  # vLLM's
    for keep in (0, -2):  # nothing to score, or a count that would drop the first tokens instead
        assert post({"input": "word " * 20, "truncate_prompt_tokens": keep}, headers=AUTH).status_code == 400
    assert post({"messages": []}, headers=AUTH).status_code == 400
    chat = httpx.post(
        disrm.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}, headers=AUTH
    )
    assert chat.status_code == 404 and "role 'disrm'" in chat.json()["error"]["message"]


def test_classify_turns_away_what_does_not_fit_the_queue_now_with_a_retry_after(disrm):
    """Requests of 5 inputs each against --max-queue 8: one queued, the next that comes meanwhile is a 503."""

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(headers=AUTH, timeout=60) as client:
            body = {"input": ["a b c"] * 5, "use_activation": False}
            return await asyncio.gather(*(client.post(disrm.url + "/classify", json=body) for _ in range(40)))

    answers = asyncio.run(burst())
    statuses = sorted({r.status_code for r in answers})
    assert statuses == [200, 503], statuses
    assert all(r.headers["retry-after"] == "1" for r in answers if r.status_code == 503)


def test_port_in_use_and_missing_model(tiny_policy_path, genrm):
    taken = subprocess.run(
        embedded_server_argv(str(tiny_policy_path), "genrm", genrm.port), capture_output=True, text=True, timeout=120
    )
    assert taken.returncode == 1 and f"port {genrm.port} on 127.0.0.1 is in use" in taken.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "rlrm.launch.server", "--model", "./no/such/model", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_sleep_mode_turns_model_requests_away_until_woken(genrm, disrm):
    chat = {"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 4}
    for server, path, body, headers in (
        (genrm, "/v1/chat/completions", chat, {}),
        (disrm, "/classify", {"input": "x"}, AUTH),
    ):
        assert httpx.get(server.url + "/is_sleeping", headers=headers).json() == {"is_sleeping": False}
        slept = httpx.post(server.url + "/sleep", params={"level": 1}, headers=headers).json()
        assert slept["is_sleeping"] is True and slept["moved_bytes"] == 0  # CPU: nothing to move off an accelerator
        asleep = httpx.post(server.url + path, json=body, headers=headers)
        assert asleep.status_code == 503 and asleep.headers["retry-after"] == "1"
        assert "POST /wake_up" in asleep.json()["error"]["message"]
        assert httpx.get(server.url + "/health").status_code == 200  # alive while asleep
        assert httpx.post(server.url + "/sleep", params={"level": 3}, headers=headers).status_code == 400
        assert httpx.post(server.url + "/wake_up", headers=headers).json()["is_sleeping"] is False
        assert httpx.post(server.url + path, json=body, headers=headers).status_code == 200


def test_a_sleep_answers_after_the_model_requests_admitted_before_it(genrm):
    """A request waiting in the engine's batch window when /sleep came ran after the weights had left its device
    (on a GPU: inputs on cuda, weights on the host, a 500); the sleep now waits for it."""

    async def go():
        async with httpx.AsyncClient(base_url=genrm.url, timeout=120) as client:
            done = []

            async def request():
                # 64 samples of a 361-token prompt: ~0.6 s, well past the sleep's 50 ms head start
                body = {"prompt": "Mia has 5 pens. " * 60, "max_tokens": 100, "temperature": 2.0, "n": 64, "seed": 3}
                answer = await client.post("/v1/completions", json=body)
                done.append("request")
                return answer

            async def sleep():
                await asyncio.sleep(0.05)  # the request is admitted and decoding
                answer = await client.post("/sleep")
                done.append("sleep")
                return answer

            answers = await asyncio.gather(request(), sleep())
            await client.post("/wake_up")
            return done, answers

    done, (generated, slept) = asyncio.run(go())
    assert generated.status_code == 200 and slept.json()["is_sleeping"] is True
    assert done == ["request", "sleep"]


def test_a_causal_lm_is_refused_as_a_disrm(tiny_policy_path):
    from rlrm.errors import ModelError
    from rlrm.launch.server.app import create_app
    from rlrm.launch.server.backends import ServerConfig

    with pytest.raises(ModelError, match="no trained classification head"):
        create_app(ServerConfig(model_path=str(tiny_policy_path), role="disrm"))


def test_cuda_graphs_on_a_server_without_a_gpu_is_one_line(tiny_policy_path):
    argv = embedded_server_argv(str(tiny_policy_path), "genrm", free_port(), extra=["--compile", "cudagraphs"])
    done = subprocess.run([*argv, "--device", "cpu"], capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and lines == [
        "error: --compile cudagraphs needs a GPU, and this server's device is cpu: use --compile off"
    ], done.stderr


def test_tf32_is_the_servers_process_setting_and_reported_only_where_it_computes(tiny_policy_path, monkeypatch):
    """`--tf32` sets CUDA's float32 products to TF32 in the server's process before its model loads; the server
    reports `tf32` in /get_model_info only where it changes the numbers (float32 on a GPU), so a trainer's
    `recompute_old_log_prob: auto` knows the replica's log-probs are another precision's."""
    import uvicorn
    from fastapi.testclient import TestClient

    from rlrm.launch.server.app import serve
    from rlrm.launch.server.backends import ServerConfig

    seen = {}

    def run(self, sockets=None):  # uvicorn's loop stands aside: the app is asked in this process
        seen["precision"] = torch.backends.cuda.matmul.fp32_precision
        with TestClient(self.config.app) as client:
            seen["info"] = client.get("/get_model_info").json()
        self.started = True
        for sock in sockets:
            sock.close()

    monkeypatch.setattr(uvicorn.Server, "run", run)
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    try:
        with reserved_port() as port:  # held until `serve` binds it (tests/fixtures/held_ports.py)
            serve(ServerConfig(model_path=str(tiny_policy_path), role="policy", device="cpu", tf32=True), port=port)
        assert seen["precision"] == "tf32"
        assert seen["info"]["tf32"] is False and seen["info"]["dtype"] == "float32"  # the CPU does not read it
        assert seen["info"]["gpu_uuid"] is None  # not on a GPU: no NCCL group can clash with it
        matmul.fp32_precision = before
        with reserved_port() as port:
            serve(ServerConfig(model_path=str(tiny_policy_path), role="policy", device="cpu"), port=port)
        assert seen["precision"] == before  # without --tf32 the process keeps its own setting
    finally:
        matmul.fp32_precision = before

    cfg = ServerConfig(model_path=str(tiny_policy_path), role="policy", device="cpu", tf32=True)
    cfg.device = "cuda:0"  # as a GPU machine resolves it (the model is not loaded here)
    assert cfg.computes_in_tf32
    cfg.dtype = "bfloat16"
    assert not cfg.computes_in_tf32


def test_answers_are_json_written_without_fastapis_deprecated_parts(tiny_policy_path):
    """Both kinds of route (FastAPI's, the model endpoints' Starlette ones) answer with rlrm's orjson response, and
    nothing warns: FastAPI's own ORJSONResponse is deprecated and would break the server once removed."""
    import warnings

    from fastapi.testclient import TestClient

    from rlrm.launch.server.app import create_app
    from rlrm.launch.server.backends import ServerConfig
    from rlrm.launch.server.endpoints import json_response_class

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        app = create_app(ServerConfig(model_path=str(tiny_policy_path), role="genrm", device="cpu"))
        with TestClient(app) as client:
            info = client.get("/get_model_info")
            done = client.post("/v1/completions", json={"prompt": QUESTION, "max_tokens": 3, "temperature": 0})
    assert info.headers["content-type"] == "application/json" and info.json()["dtype"] == "float32"
    assert json_response_class().__name__ == "OrjsonResponse"  # the serve extra has orjson: its writer, not json's
    assert json_response_class()({"nan": float("nan"), 7: 1}).body == b'{"nan":null,"7":1}'  # as FastAPI's did
    assert done.status_code == 200 and done.json()["usage"]["completion_tokens"] == 3
