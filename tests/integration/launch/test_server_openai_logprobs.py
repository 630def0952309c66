"""The embedded server's OpenAI routes, called with the openai SDK and httpx as a judge's author would: log-probs
and sampling knobs mean what they mean on OpenAI and vLLM, or are refused in one 400 naming the field.

Before: `logprobs: 0` (the sampled tokens' log-probs, no alternatives: what rlrm's own vLLM wire sends) answered
`logprobs: null`; `logprobs: 3` answered `top_logprobs: null`; tokens came back as the vocabulary's byte-level
symbols ("Ġ+", "Ċ"), so no judge could find " Yes"; a presence or frequency penalty was accepted and ignored."""

from __future__ import annotations

import httpx
import openai
import pytest


@pytest.fixture(scope="module")
def client(tiny_genrm_server):
    c = openai.OpenAI(base_url=tiny_genrm_server.url + "/v1", api_key="unused", max_retries=0)
    yield c
    c.close()


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def test_completions_logprobs_zero_gives_each_sampled_tokens_log_prob_as_text(client, model):
    done = client.completions.create(model=model, prompt="1 +", max_tokens=6, temperature=0, logprobs=0)
    choice = done.choices[0]
    assert choice.logprobs is not None and len(choice.logprobs.token_logprobs) == done.usage.completion_tokens
    assert "".join(choice.logprobs.tokens) == choice.text, (choice.logprobs.tokens, choice.text)
    assert not any("Ġ" in t or "Ċ" in t for t in choice.logprobs.tokens)
    offsets = choice.logprobs.text_offset
    assert offsets[0] == 0 and all(choice.text[o:].startswith(t) for o, t in zip(offsets, choice.logprobs.tokens))


def test_chat_logprob_tokens_are_text_with_their_utf8_bytes(client, model):
    done = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "1 + 1 = 2\n2 + 2 ="}],
        max_tokens=8,
        temperature=0,
        logprobs=True,
    )
    choice = done.choices[0]
    tokens = [t.token for t in choice.logprobs.content]
    assert "".join(tokens).startswith(choice.message.content) and choice.message.content, tokens
    assert all(bytes(t.bytes) == t.token.encode() for t in choice.logprobs.content)


def test_a_token_holding_part_of_a_character_has_its_exact_bytes(tiny_policy_path):
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from rlrm.launch.server.endpoints import token_pieces

    backend = SimpleNamespace(tokenizer=AutoTokenizer.from_pretrained(tiny_policy_path))
    ids = backend.tokenizer.encode(" é日本")  # byte-level BPE: each multi-byte character split over tokens
    pieces = token_pieces(backend, SimpleNamespace(token_ids=ids))
    assert b"".join(bytes(raw) for _, raw in pieces).decode() == " é日本"


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"logprobs": 3}, "logprobs=3 (the top alternatives of each token) is not supported"),
        ({"logprobs": 0, "echo": True}, "echo=true with logprobs is not supported"),
        ({"presence_penalty": 2.0}, "presence_penalty=2 is not implemented"),
        ({"frequency_penalty": -1.0}, "frequency_penalty=-1 is not implemented"),
    ],
)
def test_what_is_not_implemented_is_a_400_naming_it(tiny_genrm_server, extra, named):
    body = {"prompt": "1 +", "max_tokens": 4, "temperature": 0, **extra}
    answer = httpx.post(tiny_genrm_server.url + "/v1/completions", json=body, timeout=60)
    assert answer.status_code == 400 and named in answer.json()["error"]["message"], answer.text


def test_the_sdk_raises_bad_request_for_a_chat_penalty_and_takes_zero(client, model):
    msgs = [{"role": "user", "content": "2 + 2 ="}]
    with pytest.raises(openai.BadRequestError, match="presence_penalty=2 is not implemented"):
        client.chat.completions.create(model=model, messages=msgs, max_tokens=4, temperature=0, presence_penalty=2.0)
    done = client.chat.completions.create(model=model, messages=msgs, max_tokens=4, presence_penalty=0.0)
    assert done.choices[0].message.content is not None
