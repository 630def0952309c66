"""The key on every path of a vLLM server rlrm launches, /health aside: `--middleware rlrm_vllm_auth.RequireKey`,
this folder on the server's PYTHONPATH (rlrm/launch/fleet/backends.py).

vLLM checks VLLM_API_KEY only under /v1, /v2, /inference and /cohere. Its /classify (what rlrm's DisRM client
calls) and, with VLLM_SERVER_DEV_MODE=1 (rlrm's policy replicas), /collective_rpc, /sleep, /wake_up and
/reset_prefix_cache answered anyone: another user of the machine could load weights of their choosing into a
run's policy replica. Standalone: the server's own environment has vLLM, not rlrm.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os

OPEN_PATHS = ("/health",)  # readiness, as on rlrm's embedded server


class RequireKey:
    """Pure ASGI middleware: 401 for any HTTP request without `Authorization: Bearer $VLLM_API_KEY`."""

    def __init__(self, app, key: str | None = None):
        self.app = app
        key = key if key is not None else os.environ.get("VLLM_API_KEY", "")
        self.digest = hashlib.sha256(key.encode()).digest() if key else None

    async def __call__(self, scope, receive, send):
        if self.digest is None or scope["type"] not in ("http", "websocket") or scope.get("method") == "OPTIONS":
            return await self.app(scope, receive, send)
        path = scope["path"].removeprefix(scope.get("root_path", ""))
        if path in OPEN_PATHS or self._authorized(scope):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        body = json.dumps({"error": {"message": "Unauthorized", "type": "authentication_error", "code": 401}})
        await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body.encode()})

    def _authorized(self, scope) -> bool:
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, token = given.partition(b" ")
        if scheme.lower() != b"bearer" or self.digest is None:
            return False
        return hmac.compare_digest(hashlib.sha256(token).digest(), self.digest)
