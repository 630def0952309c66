"""A custom function's calls through the forwarder (rlrm/engine/rewards/metered.py), without a server: every body is
sized and sent as it came, whatever its shape (SGLang's batch /generate) or its fields' types (the server answers a
wrong one with its own 400; a bare 500 from rlrm would hide it), and a batch's prompts and answers are all counted."""

from __future__ import annotations

import asyncio
import json

import pytest

from rlrm.engine.rewards.ledger import CallLedger
from rlrm.engine.rewards.metered import MeteredBalancer, estimate_tokens

BATCH = {  # SGLang's batch /generate: a list of prompts, one set of sampling params each
    "input_ids": [[1, 2, 3], [4, 5, 6, 7]],
    "sampling_params": [{"max_new_tokens": 8}, {"max_new_tokens": 8}],
}
ANSWERS = [  # its answer: one per prompt
    {"text": "a", "meta_info": {"prompt_tokens": 3, "completion_tokens": 8}},
    {"text": "b", "meta_info": {"prompt_tokens": 4, "completion_tokens": 8}},
]


class Upstream:
    """Stands in for ReplicaBalancer: answers every call 200 with ANSWERS, and keeps what it was sent."""

    urls = ["http://upstream"]

    def __init__(self):
        self.sent: list[bytes] = []

    async def forward(self, method, path, data, timeout_s):
        self.sent.append(data)
        return 200, json.dumps(ANSWERS).encode(), "application/json", self.urls[0]


def forward(body: bytes) -> tuple[int, CallLedger, Upstream]:
    upstream, ledger = Upstream(), CallLedger()
    status, _, _ = asyncio.run(MeteredBalancer(upstream, cfg=None).forward("POST", "/generate", body, 5.0, ledger))
    return status, ledger, upstream


@pytest.mark.parametrize(
    ("body", "tokens"),
    [
        (BATCH, 7 + 2 * 8),  # 7 prompt tokens, 8 answer tokens each
        ({"input_ids": [[1, 2], [3]], "sampling_params": {"max_new_tokens": 4}}, 3 + 2 * 4),  # one set for both
        ({"text": ["ab", "cd"], "sampling_params": {"max_new_tokens": 10}}, len('["ab", "cd"]') // 4 + 2 * 10),
        ({"prompt": ["ab", "cd"], "max_tokens": 10}, len('["ab", "cd"]') // 4 + 2 * 10),  # /v1/completions' batch
    ],
)
def test_a_batch_counts_every_prompt_and_answer(body, tokens):
    assert estimate_tokens(json.dumps(body).encode()) == tokens


@pytest.mark.parametrize("max_tokens", ["many", [64], 1e309, True, -5, {"n": 64}])
def test_a_count_that_is_no_number_counts_nothing(max_tokens):
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    # 1e309 is written as Infinity, which Python's json reads back (a client's json may write it too)
    assert estimate_tokens(json.dumps({**chat, "max_tokens": max_tokens}).encode()) == estimate_tokens(chat)


@pytest.mark.parametrize(
    "body",
    [
        BATCH,
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"},
        {"text": "hi", "sampling_params": "greedy"},
        {"text": "hi", "sampling_params": [{"max_new_tokens": "8"}, 3]},
    ],
)
def test_the_forwarder_sends_any_body_as_it_came(body):
    data = json.dumps(body).encode()
    status, _, upstream = forward(data)
    assert (status, upstream.sent) == (200, [data])  # the server answers it, not rlrm


def test_a_batch_answer_counts_every_answers_usage():
    _, ledger, _ = forward(json.dumps(BATCH).encode())
    assert (ledger.prompt_tokens, ledger.completion_tokens) == (3 + 4, 8 + 8)
