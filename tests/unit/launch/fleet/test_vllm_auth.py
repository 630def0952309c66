"""The middleware rlrm gives the vLLM servers it launches with a key (rlrm/launch/fleet/vllm_plugin): every path but
/health needs `Authorization: Bearer <key>`, where vLLM's own check covers /v1, /v2, /inference and /cohere only.
Called as vLLM calls it, an ASGI app; the real vLLM replica: tests/integration/launch/on_vllm/test_vllm_rollout.py."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

from rlrm.launch.fleet.backends import VLLM_PLUGIN_DIR


def _middleware():
    spec = importlib.util.spec_from_file_location("rlrm_vllm_auth", Path(VLLM_PLUGIN_DIR) / "rlrm_vllm_auth.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.RequireKey


def _call(path: str, authorization: str | None = None, key: str | None = "k", method: str = "POST"):
    reached, sent = [], []

    async def app(scope, receive, send):
        reached.append(scope["path"])

    async def send(message):
        sent.append(message)

    headers = [(b"authorization", authorization.encode())] if authorization is not None else []
    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    asyncio.run(_middleware()(app, key=key)(scope, None, send))
    return (200 if reached else sent[0]["status"]), sent


@pytest.mark.parametrize("path", ["/collective_rpc", "/classify", "/sleep", "/reset_prefix_cache", "/metrics", "/v1/x"])
def test_every_path_but_health_needs_the_key(path):
    assert _call(path)[0] == 401
    assert _call(path, "Bearer wrong")[0] == 401
    assert _call(path, "Basic k")[0] == 401
    assert _call(path, "Bearer k")[0] == 200
    assert _call(path, "bearer k")[0] == 200  # the scheme is case-blind, as vLLM's own check


def test_health_and_preflight_are_open_and_no_key_guards_nothing():
    assert _call("/health")[0] == 200
    assert _call("/collective_rpc", method="OPTIONS")[0] == 200
    assert _call("/collective_rpc", key="")[0] == 200  # a replica launched without a key: vLLM's own rules


def test_the_refusal_is_json_in_openais_error_shape():
    status, sent = _call("/classify")
    assert status == 401 and (b"content-type", b"application/json") in sent[0]["headers"]
    assert b'"authentication_error"' in sent[1]["body"]
