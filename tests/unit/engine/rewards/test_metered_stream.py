"""The tokens of a streamed call a custom reward made through the forwarder: read from the stream's usage chunk
(rlrm/engine/rewards/metered.py), whatever lines come before it."""

from __future__ import annotations

import json

import pytest

from rlrm.engine.rewards.metered import _answer, _usage

USAGE = {"prompt_tokens": 24, "completion_tokens": 6, "total_tokens": 30}
CHUNK = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Score"}}]}


def stream(*opening: str) -> bytes:
    lines = [*opening, f"data: {json.dumps(CHUNK)}", f"data: {json.dumps({**CHUNK, 'choices': [], 'usage': USAGE})}"]
    return ("\n\n".join([*lines, "data: [DONE]"]) + "\n\n").encode()


@pytest.mark.parametrize("opening", [(), (": OPENROUTER PROCESSING",), ("event: message",)])
def test_a_streams_usage_chunk_is_counted_after_comments_and_event_lines(opening):
    assert _usage(_answer(stream(*opening))) == USAGE


def test_a_stream_without_usage_and_a_plain_answer():
    plain = json.dumps({"choices": [], "usage": USAGE}).encode()
    assert _usage(_answer(plain)) == USAGE
    assert _answer(f"data: {json.dumps(CHUNK)}\n\ndata: [DONE]\n\n".encode()) is None  # no include_usage: unknown
