"""The embedded inference server: FastAPI + transformers, CPU or GPU, in vLLM / SGLang / OpenAI shapes.

    rlrm launch server --model tiny:policy --role genrm --port 8000
    python -m rlrm.launch.server --model PATH --role disrm --port 8001      # the process entry (a folder or hub id)

Endpoints: GET /health, GET /v1/models, POST /v1/completions, POST /v1/chat/completions,
POST /generate (SGLang native), POST /classify (vLLM), and vLLM's sleep mode (POST /sleep,
POST /wake_up, GET /is_sleeping) for colocated placement, and for policy servers SGLang's weight
updates (POST /update_weights_from_disk, GET /get_model_info, GET /get_weight_version: see
rlrm/launch/server/weight_routes.py; POST /init_weights_update_group, /update_weights_from_distributed,
/destroy_weights_update_group: see rlrm/launch/server/group_routes.py). Bad requests get 400 with an OpenAI-style
error body naming the problem; a full queue gets 503 with Retry-After; with an API key every
endpoint but /health needs `Authorization: Bearer KEY`. The key comes from the environment
(RLRM_API_KEY, or the variable `--api-key-env` names), so it is not on the command line. Without a key
the server listens on loopback only, unless `--allow-unauthenticated` says otherwise; weights load from
`--weights-dir` only (rlrm/launch/server/weight_source.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from rlrm.errors import RlrmError
from rlrm.inference.loading import check_model_path
from rlrm.inference.tf32 import cuda_tf32_on
from rlrm.launch.common.auth import ENV_VAR, authorized, check_bind, key_from_env
from rlrm.launch.common.model_digest import folder_digest
from rlrm.launch.common.ports import bind_port
from rlrm.launch.common.roles import Role
from rlrm.launch.server import routes
from rlrm.launch.server.backends import COMPILE, CausalLMBackend, ClassifierBackend, ServerConfig
from rlrm.launch.server.group_routes import WeightGroups, add_distributed_routes
from rlrm.launch.server.protocol import RequestError
from rlrm.launch.server.sleep import SLEEP_GATED, SleepState, add_sleep_routes
from rlrm.launch.server.weight_routes import WeightState, add_weight_routes


def create_app(cfg: ServerConfig):
    """The FastAPI application for one model in one role."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse
    from starlette.exceptions import HTTPException

    backend = CausalLMBackend(cfg) if cfg.role.generates else ClassifierBackend(cfg)

    @asynccontextmanager
    async def lifespan(app):
        yield
        await backend.close()

    app = FastAPI(title="rlrm embedded server", lifespan=lifespan, default_response_class=routes.json_response_class())
    app.state.cfg, app.state.backend, app.state.started = cfg, backend, int(time.time())

    engine = getattr(backend, "engine", None)  # generation: compiled decoding's graphs hold the weights' addresses
    sleep_state = SleepState(backend.model, backend.lock, backend.device, getattr(engine, "release_compiled", None))
    weight_state = WeightState(
        backend, cfg.model_path, wait_for_weights=cfg.wait_for_weights, weights_dir=cfg.weights_dir
    )

    def gate(path: str, headers: list[tuple[bytes, bytes]]):
        """The error response for a request the API key or sleep mode turns away, else None."""
        if cfg.api_key and path != "/health":
            if not authorized(dict(headers).get(b"authorization", b""), cfg.api_key):
                return _error(
                    401, "missing or wrong API key: send 'Authorization: Bearer <key>'", "authentication_error"
                )
        try:
            sleep_state.check(path)
            weight_state.check(path)
        except RequestError as exc:
            return _error(exc.status, str(exc), "overloaded", exc.headers)
        return None

    app.add_middleware(_Gate, gate=gate, sleep_state=sleep_state)

    @app.exception_handler(RequestError)
    async def on_request_error(request, exc: RequestError):
        kind = {503: "overloaded", 500: "server_error"}.get(exc.status, "invalid_request_error")
        return _error(exc.status, str(exc), kind, exc.headers)

    @app.exception_handler(HTTPException)
    async def on_http_error(request, exc: HTTPException):
        # a path or method the server does not serve: OpenAI's error shape, not Starlette's {"detail": ...}
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return _error(exc.status_code, message, "invalid_request_error", exc.headers)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request, exc: RequestValidationError):
        return _error(400, _validation_message(exc), "invalid_request_error")

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health():
        return PlainTextResponse("ok")

    identity = _reward_identity(cfg)

    @app.get("/v1/models")
    async def models():
        entry = {
            "id": cfg.model_name,
            "object": "model",
            "created": app.state.started,
            "owned_by": "rlrm",
            "max_model_len": backend.max_len,
            "role": cfg.role.value,
            **identity,
        }
        return {"object": "list", "data": [entry]}

    routes.add_routes(app, cfg, backend)
    add_sleep_routes(app, sleep_state)
    add_weight_routes(app, cfg, backend, weight_state)
    add_distributed_routes(app, cfg, WeightGroups(weight_state, backend.device, cfg.weight_sync_timeout_s))

    def _error(status: int, message: str, kind: str, headers: Mapping[str, str] | None = None):
        body = {"error": {"message": message, "type": kind, "code": status}}
        return JSONResponse(body, status_code=status, headers=headers)

    return app


class _Gate:
    """Plain ASGI middleware that answers turned-away requests itself (Starlette's `@app.middleware`
    wraps every request in a task group and a receive wrapper: a third of the event loop's time
    under 64 concurrent chat clients on the tiny judge)."""

    def __init__(self, app, gate, sleep_state: SleepState):
        self.app, self.gate, self.sleep_state = app, gate, sleep_state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self.gate(scope["path"], scope["headers"])
        if refused is not None:
            await refused(scope, receive, send)
            return
        if scope["path"] not in SLEEP_GATED:
            await self.app(scope, receive, send)
            return
        self.sleep_state.started()  # a sleep asked for now waits for this request's answer
        try:
            await self.app(scope, receive, send)
        finally:
            self.sleep_state.finished()


def _reward_identity(cfg: ServerConfig) -> dict[str, str]:
    """What a reward model's /v1/models entry says of the weights answering (a run's reward contract reads it at
    running addresses: two judges served under one name were one): their folder's digest, taken as they load, and
    the dtype. Nothing for a policy (its weights change with every sync) or a hub id (no folder to read here)."""
    folder = Path(cfg.model_path)
    if cfg.role == Role.POLICY or not folder.is_dir():
        return {}
    try:
        return {"weights": folder_digest(folder), "dtype": cfg.dtype}
    except OSError:  # a file it cannot read: its identity stays the name
        return {}


def _validation_message(exc) -> str:
    err = exc.errors()[0]
    if err.get("type") == "json_invalid":
        return f"request body is not valid JSON: {err.get('ctx', {}).get('error', err['msg'])}"
    parts = list(err["loc"])
    unknown = err.get("type") == "extra_forbidden"  # its last part is the unknown field's name, whatever it reads
    last = len(parts) - 1
    kept = [p for i, p in enumerate(parts) if p != "body" and ((unknown and i == last) or not _union_member(p))]
    loc = ".".join(str(p) for p in kept) or "body"
    return f"{loc}: {err['msg']}"


def _union_member(part) -> bool:
    """A part of pydantic's error location that names which type of a union was tried (`str`, `list[int]`,
    `GenerateSamplingParams`), not a field: the message names the field alone."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool") or "[" in part or part[:1].isupper())


# On SIGTERM, requests still running (a weight-update group join waiting for its master) get this long before
# the server stops anyway: a supervisor's stop never waits out a join's timeout.
GRACEFUL_SHUTDOWN_S = 2

# Idle connections stay open this long (uvicorn's default is 5 s): longer than clients keep them in their
# pools (aiohttp 15 s, httpx 5 s, the SGLang router's reqwest 90 s), so a client never reuses a connection
# the server has just closed, a request that would fail and be retried.
KEEPALIVE_S = 120


def serve(
    cfg: ServerConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "warning",
    allow_unauthenticated: bool = False,
) -> None:
    """Run the server in the foreground until interrupted (ConfigError: off loopback with no key, unless allowed)."""
    import uvicorn

    sock = bind_port(host, port)  # before the model loads: no other process is handed this port meanwhile
    check_bind(host, cfg.api_key, allow_unauthenticated)
    if cfg.tf32:
        cuda_tf32_on()  # the process is the server's: nothing to put back
    app = create_app(cfg)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=KEEPALIVE_S,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    if not server.started:  # as uvicorn.run: a failed startup (the lifespan's) is a non-zero exit
        raise SystemExit(3)


def main(argv: list[str] | None = None) -> None:
    """`python -m rlrm.launch.server`: the embedded server of `rlrm launch server`, with the options the fleet passes
    too (--threads, --batch-wait-ms, --batch-gap-ms, --wait-for-weights, --weight-sync-timeout-s)."""
    import argparse
    import os
    import sys

    parser = argparse.ArgumentParser(prog="python -m rlrm.launch.server", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", required=True, help="HF folder or hub id (`rlrm launch server` also takes tiny:NAME)"
    )
    parser.add_argument("--role", choices=[r.value for r in Role], default=Role.GENRM.value)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--max-queue", type=int, default=1024)
    parser.add_argument(
        "--api-key", default=None, help="visible to local users in ps: prefer RLRM_API_KEY or --api-key-env"
    )
    parser.add_argument(
        "--api-key-env", default=None, metavar="NAME", help="read the API key from this environment variable"
    )
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument(
        "--batch-wait-ms", type=float, default=2.0, help="longest a generation batch waits for more requests"
    )
    parser.add_argument(
        "--batch-gap-ms",
        type=float,
        default=None,
        help="close a generation batch once no request arrived for this long (with a larger --batch-wait-ms)",
    )
    parser.add_argument(
        "--compile",
        choices=COMPILE,
        default="off",
        help="generation: decode with a static KV cache and each step a CUDA graph (cudagraphs, GPU only) or "
        "torch.compile'd (inductor), as rollout.compile does in process",
    )
    parser.add_argument(
        "--tf32",
        action="store_true",
        help="CUDA's float32 matrix products in TF32 (tensor cores), as model.tf32 does for the trainer; nothing "
        "at bfloat16, float16 or on the CPU",
    )
    parser.add_argument(
        "--wait-for-weights",
        action="store_true",
        help="answer /health and generation with 503 until the first weight update (from disk or distributed)",
    )
    parser.add_argument(
        "--weight-sync-timeout-s",
        type=float,
        default=300.0,
        help="bound on joining a weight-update group (/init_weights_update_group) and on each broadcast",
    )
    parser.add_argument(
        "--weights-dir",
        default=None,
        metavar="FOLDER",
        help="the only folder /update_weights_from_disk loads from (besides the server's own --model folder); "
        "without it the server loads no other weights from disk",
    )
    parser.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="serve on an address other than loopback without an API key (anyone who reaches it can use it)",
    )
    args = parser.parse_args(argv)

    try:
        api_key = args.api_key or (key_from_env(args.api_key_env, "--api-key-env") if args.api_key_env else None)
        api_key = api_key or os.environ.get(ENV_VAR) or None
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        cfg = ServerConfig(
            model_path=check_model_path(args.model),
            role=Role(args.role),
            dtype=args.dtype,
            max_batch=args.max_batch,
            max_queue=args.max_queue,
            api_key=api_key,
            served_model_name=args.served_model_name or args.model,
            device=args.device,
            wait_for_weights=args.wait_for_weights,
            batch_wait_ms=args.batch_wait_ms,
            batch_gap_ms=args.batch_gap_ms,
            compile=args.compile,
            weight_sync_timeout_s=args.weight_sync_timeout_s,
            weights_dir=args.weights_dir,
            tf32=args.tf32,
        )
        serve(cfg, args.host, args.port, allow_unauthenticated=args.allow_unauthenticated)
    except RlrmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
