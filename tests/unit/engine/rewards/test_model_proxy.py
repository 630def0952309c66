"""The model proxy's answer typing and OpenAI-style errors, without a server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rlrm.engine.rewards.model_proxy import typed_answer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))


@pytest.mark.parametrize(
    ("status", "body", "ctype", "expected_type", "expected_body"),
    [
        # the SGLang router's own /v1/models: JSON sent as text/plain
        (200, b'{"object": "list"}', "text/plain", "application/json", b'{"object": "list"}'),
        (200, b"[1]", "application/octet-stream", "application/json", b"[1]"),
        (200, b"OK", "text/plain", "text/plain", b"OK"),  # /health: text stays text
        (200, b"data: {}\n\n", "text/event-stream", "text/event-stream", b"data: {}\n\n"),  # a stream as it came
        (400, b'{"error": {"message": "x"}}', "application/json", "application/json", b'{"error": {"message": "x"}}'),
        (200, b"<html></html>", "text/html", "text/html", b"<html></html>"),
    ],
)
def test_typed_answer_types_json_and_passes_the_rest(status, body, ctype, expected_type, expected_body):
    assert typed_answer(status, body, ctype, "GET /v1/models") == (expected_body, expected_type)


def test_an_error_without_a_json_body_gets_an_openai_style_one():
    import json

    # the SGLang router answers a path it does not route with 404 and no body
    body, ctype = typed_answer(404, b"", "application/octet-stream", "POST /classify")
    assert ctype == "application/json"
    assert json.loads(body) == {
        "error": {
            "message": "the reward servers answered 404 to POST /classify",
            "type": "invalid_request_error",
            "code": 404,
        }
    }
    body, _ = typed_answer(502, b"Bad Gateway", "text/plain", "POST /generate")
    assert json.loads(body)["error"]["message"].endswith("502 to POST /generate: Bad Gateway")
    assert json.loads(body)["error"]["type"] == "server_error"
