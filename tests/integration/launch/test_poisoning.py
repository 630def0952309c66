"""No request poisons another: token ids are checked per request before batching, and a batched
forward that raises is retried request by request so only the guilty request fails."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from rlrm.launch.fleet.process import ServerProcess, embedded_server_argv
from rlrm.launch.server import batcher as batching


@pytest.fixture(scope="module")
def disrm(random_disrm_path):
    extra = ["--max-batch", "64", "--threads", "1"]
    with ServerProcess.on_free_port(
        lambda port: embedded_server_argv(str(random_disrm_path), "disrm", port, extra=extra)
    ) as server:
        yield server


@pytest.fixture(scope="module")
def genrm(tiny_genrm_server):
    return tiny_genrm_server  # the session's (tests/integration/conftest.py)


def _valid_inputs(n: int) -> list[list[int]]:
    # different lengths, so the batch is padded and every row's last real token differs
    return [[(7 * i + j) % 150 + 1 for j in range(3 + i % 11)] for i in range(n)]


def test_a_poisoned_classify_request_fails_alone_among_60_concurrent_ones(disrm):
    inputs = _valid_inputs(60)
    alone = []
    with httpx.Client(base_url=disrm.url, timeout=60) as client:
        for ids in inputs:
            resp = client.post("/classify", json={"model": "x", "input": [ids], "use_activation": False})
            assert resp.status_code == 200, resp.text
            alone.append(resp.json()["data"][0]["probs"][0])

    async def together(poison):
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(base_url=disrm.url, timeout=60, limits=limits) as client:
            bodies = [{"model": "x", "input": [ids], "use_activation": False} for ids in inputs]
            bodies.insert(30, {"model": "x", "input": poison})
            return await asyncio.gather(*(client.post("/classify", json=b) for b in bodies))

    for poison in ([[5, 99999999]], [[5, -3]], [5, 2**70]):
        responses = asyncio.run(together(poison))
        bad = responses.pop(30)
        assert bad.status_code == 400, bad.text
        assert "token id" in bad.json()["error"]["message"] and "input" in bad.json()["error"]["message"]
        assert [r.status_code for r in responses] == [200] * 60
        scores = [r.json()["data"][0]["probs"][0] for r in responses]
        assert scores == pytest.approx(alone, abs=1e-5)  # the same as alone: padding and batch-mates change nothing
    assert httpx.get(disrm.url + "/health").status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/completions", {"prompt": [5, 99999999], "max_tokens": 2}, "prompt[1]"),
        ("/v1/completions", {"prompt": [-1, 5], "max_tokens": 2}, "prompt[0]"),
        ("/generate", {"input_ids": [5, 6, 1 << 40], "sampling_params": {"max_new_tokens": 2}}, "input_ids[2]"),
        ("/generate", {"input_ids": [[5, 6], [7, -8]], "sampling_params": {"max_new_tokens": 2}}, "input_ids[1][1]"),
    ],
)
def test_out_of_vocabulary_ids_on_generation_endpoints_are_400_naming_the_field(genrm, path, body, field):
    resp = httpx.post(genrm.url + path, json=body, timeout=60)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"].startswith(field + ": token id")
    ok = httpx.post(genrm.url + "/v1/completions", json={"prompt": [5, 6], "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200  # the server goes on serving


@pytest.mark.parametrize("prompt", [[[5, 6], [7, 8]], ["one", "two"]])
def test_a_batch_of_prompts_is_400_saying_to_send_one_per_request(genrm, prompt):
    # OpenAI's and vLLM's /v1/completions take a list of prompts; the embedded server takes one (it said
    # "prompt.str: Input should be a valid string")
    resp = httpx.post(genrm.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2}, timeout=60)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["message"] == (
        "prompt: Value error, a batch of 2 prompts is not served here (OpenAI's and vLLM's list of strings or of "
        "token-id lists): send one prompt per request, as a string or one list of token ids"
    )


def test_a_forward_that_raises_for_one_request_fails_only_that_request(random_disrm_path):
    """The real classifier backend and batcher, in process; the poisoned input skips the server's
    checks (as a bug or a model limit no check knows would), so the batched forward itself raises."""
    from rlrm.launch.server.backends import ClassifierBackend, ServerConfig

    backend = ClassifierBackend(ServerConfig(model_path=str(random_disrm_path), role="disrm", max_batch=64))
    inputs = _valid_inputs(12)
    alone = [backend._forward([ids])[0] for ids in inputs]

    async def scenario():
        jobs = [backend.batcher.submit([ids]) for ids in inputs]
        jobs.insert(5, backend.batcher.submit([[5, 99999999]]))
        outcomes = await asyncio.gather(*jobs, return_exceptions=True)
        batches = backend.batcher.batches_run
        await backend.close()
        return outcomes, batches

    outcomes, batches = asyncio.run(scenario())
    failed = outcomes.pop(5)
    assert (
        isinstance(failed, batching.ForwardFailed) and failed.input_error
    )  # its batch-mates succeeded alone: its input
    assert "IndexError" in str(failed)
    assert [o[0] for o in outcomes] == pytest.approx(alone, abs=1e-5)
    assert backend.batcher.split_batches >= 1 and batches >= 2


def test_a_forward_that_fails_for_every_request_is_a_server_fault():
    calls = []

    def broken(items):
        calls.append(len(items))
        raise RuntimeError("device lost")

    async def scenario():
        batcher = batching.DynamicBatcher(broken, max_batch=8, wait_ms=50)
        try:
            return await asyncio.gather(*(batcher.submit([i]) for i in range(3)), return_exceptions=True)
        finally:
            await batcher.close()

    outcomes = asyncio.run(scenario())
    assert all(isinstance(o, batching.ForwardFailed) and not o.input_error for o in outcomes)  # nobody to blame: 500
    assert calls == [3, 1, 1, 1]  # one batch, then each request alone


def test_a_lone_request_whose_forward_raises_on_bad_input_is_an_input_error():
    def forward(items):
        return [1.0 / x for x in items]  # ZeroDivisionError for 0: an arithmetic fault of this input

    def index_forward(items):
        return [[1.0][x] for x in items]

    async def scenario(fn, item):
        batcher = batching.DynamicBatcher(fn, max_batch=8)
        try:
            return await asyncio.gather(batcher.submit([item]), return_exceptions=True)
        finally:
            await batcher.close()

    (div,) = asyncio.run(scenario(forward, 0))
    assert isinstance(div, batching.ForwardFailed) and not div.input_error  # an unknown kind, alone: a server fault
    (idx,) = asyncio.run(scenario(index_forward, 5))
    assert isinstance(idx, batching.ForwardFailed) and idx.input_error  # IndexError: the input's own


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"sampling_params": {"max_new_tokens": 4, "stop_token_ids": [2**70]}}, "sampling_params.stop_token_ids[0]"),
        ({"sampling_params": {"max_new_tokens": 4, "sampling_seed": 2**64}}, "sampling_params.sampling_seed"),
        # OpenAI's name for it was taken and dropped: the request answered unseeded, every time another answer
        ({"sampling_params": {"max_new_tokens": 4, "seed": 3}}, "sampling_params.seed: /generate's seed is sampling_"),
    ],
)
def test_a_poisoned_generate_request_fails_alone_among_concurrent_ones(genrm, body, says):
    """Values the engine would build int64 tensors of: a 400 for the one request, never a 500 for its batch."""
    good = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4, "temperature": 0}}

    async def together():
        async with httpx.AsyncClient(base_url=genrm.url, timeout=60) as client:
            bodies = [good] * 4 + [{"input_ids": [5, 6, 7], **body}] + [good] * 4
            return await asyncio.gather(*(client.post("/generate", json=b) for b in bodies))

    responses = asyncio.run(together())
    bad = responses.pop(4)
    assert bad.status_code == 400 and bad.json()["error"]["message"].startswith(says), bad.text
    assert [r.status_code for r in responses] == [200] * 8
    assert len({tuple(r.json()["output_ids"]) for r in responses}) == 1  # greedy, the same as one another


def test_seeds_take_64_bits_and_n_choices_past_the_top_wrap(genrm):
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "n": 2}
    assert (
        httpx.post(genrm.url + "/v1/chat/completions", json={**chat, "seed": 2**64 - 1}, timeout=60).status_code == 200
    )
    over = httpx.post(genrm.url + "/v1/chat/completions", json={**chat, "seed": 2**64}, timeout=60)
    assert over.status_code == 400 and over.json()["error"]["message"].startswith("seed:")


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"add_generation_prompt": False}, "chat_template_kwargs: add_generation_prompt cannot be set by a request"),
        ({"tokenize": False, "chat_template": "x"}, "chat_template_kwargs: chat_template, tokenize cannot be set"),
    ],
)
def test_chat_template_kwargs_that_are_the_servers_own_arguments_are_400(genrm, kwargs, says):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "chat_template_kwargs": kwargs}
    resp = httpx.post(genrm.url + "/v1/chat/completions", json=body, timeout=60)
    assert resp.status_code == 400 and resp.json()["error"]["message"].startswith(says), resp.text
    with httpx.Client(base_url=genrm.url, timeout=60) as client:  # one connection: still open after the 400
        for _ in range(2):
            assert client.post("/v1/chat/completions", json=body).status_code == 400
        assert client.get("/health").status_code == 200


def test_a_template_that_raises_on_the_messages_is_a_400(genrm):
    body = {"messages": [{"role": "assistant", "content": "x"}] * 2, "max_tokens": 2}  # the tiny template takes any
    assert httpx.post(genrm.url + "/v1/chat/completions", json=body, timeout=60).status_code == 200
    from rlrm.launch.server.completions import prompt_of

    class Raising:
        def apply_chat_template(self, *args, **kwargs):
            from jinja2.exceptions import TemplateError

            raise TemplateError("Conversation roles must alternate user/assistant")

    from rlrm.launch.server.protocol import RequestError

    with pytest.raises(RequestError, match="the chat template cannot render these messages: TemplateError: Conv"):
        prompt_of(Raising(), [{"role": "assistant", "content": "x"}], {})


def test_openai_content_parts_are_read_as_the_joined_text(genrm):
    said = {"role": "user", "content": "Tom has 3 coins."}
    parts = {"role": "user", "content": [{"type": "text", "text": "Tom has 3 coins."}]}
    answers = [
        httpx.post(
            genrm.url + "/v1/chat/completions",
            json={"messages": [m], "max_tokens": 5, "temperature": 0, "logprobs": True},
            timeout=60,
        ).json()
        for m in (said, parts)
    ]
    assert answers[0]["choices"][0]["message"] == answers[1]["choices"][0]["message"]
    assert answers[0]["usage"] == answers[1]["usage"]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"top_logprobs": 3, "logprobs": True}, "top_logprobs is not supported by the embedded server"),
        ({"temperature": float("nan")}, "temperature: Input should be a finite number"),
    ],
)
def test_what_the_embedded_server_cannot_honour_is_a_400_saying_so(genrm, extra, says):
    import json

    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **extra})  # NaN as JSON has it
    resp = httpx.post(genrm.url + "/v1/chat/completions", content=body, timeout=60)
    assert resp.status_code == 400 and resp.json()["error"]["message"].startswith(says), resp.text


def test_a_request_larger_than_the_queue_is_a_400_and_admits_nothing(genrm):
    prompts = [[5, 6]] * 1100  # --max-queue 1024 (the default)
    resp = httpx.post(
        genrm.url + "/generate", json={"input_ids": prompts, "sampling_params": {"max_new_tokens": 200}}, timeout=60
    )
    assert resp.status_code == 400 and "retry-after" not in resp.headers
    assert resp.json()["error"]["message"] == (
        "1100 sequences in one request; this server takes at most 1024 (--max-queue): split the request"
    )
    small = httpx.post(genrm.url + "/generate", json={"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2}})
    assert small.status_code == 200  # nothing of the refused request is queued ahead of it
    assert httpx.head(genrm.url + "/health").status_code == 200  # load balancers' probe


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        ("/v1/completions", {"prompt": [5, 6], "max_tokens": "5"}, "max_tokens: Input should be a valid integer"),
        ("/generate", {"input_ids": [True, False]}, "input_ids.0: Input should be a valid integer"),
    ],
)
def test_values_of_the_wrong_type_are_not_coerced(genrm, path, body, says):
    """ "5" is not a number and true is not a token id (pydantic's lax mode would take both)."""
    resp = httpx.post(genrm.url + path, json=body, timeout=60)
    assert resp.status_code == 400 and resp.json()["error"]["message"].startswith(says), resp.text


def test_an_unknown_field_is_named_in_its_400(genrm):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "Temperature": 0.5}
    resp = httpx.post(genrm.url + "/v1/chat/completions", json=body, timeout=60)
    assert resp.status_code == 400 and resp.json()["error"]["message"] == "Temperature: Extra inputs are not permitted"
