"""`rlrm launch server`: serve a model (policy, judge or DisRM) over HTTP in the vLLM/SGLang/OpenAI shapes."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rlrm.cli.common import friendly_errors

app = typer.Typer(help="Launch inference servers.", no_args_is_help=True)


@app.command("server")
@friendly_errors
def server(
    model: Annotated[str, typer.Option(help="HF folder, hub id, or tiny:NAME.")],
    role: Annotated[str, typer.Option(help="policy, genrm (judge) or disrm (sequence classifier).")] = "genrm",
    host: Annotated[str, typer.Option(help="Address to bind (loopback unless you mean otherwise).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    dtype: Annotated[str, typer.Option(help="float32, bfloat16 or float16.")] = "float32",
    max_batch: Annotated[int, typer.Option(help="Most requests in one batched forward.", min=1)] = 64,
    max_queue: Annotated[int, typer.Option(help="Queued requests beyond which the server answers 503.", min=1)] = 1024,
    api_key: Annotated[Optional[str], typer.Option(envvar="RLRM_API_KEY", help="Require 'Authorization: Bearer KEY'.")] = None,
    served_model_name: Annotated[Optional[str], typer.Option(help="Name reported by /v1/models.")] = None,
) -> None:
    """Run the embedded server in the foreground (Ctrl-C stops it)."""
    from rlrm.engine.models.tiny import resolve_model_path
    from rlrm.errors import ConfigError
    from rlrm.launch.backends import ServerConfig
    from rlrm.launch.server import ROLES, serve

    if role not in ROLES:
        raise ConfigError(f"unknown role {role!r}; use one of {', '.join(ROLES)}")
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ConfigError(f"unknown dtype {dtype!r}; use float32, bfloat16 or float16")
    cfg = ServerConfig(
        model_path=resolve_model_path(model), role=role, dtype=dtype, max_batch=max_batch, max_queue=max_queue,
        api_key=api_key, served_model_name=served_model_name or model,
    )
    typer.echo(f"serving {model} as {role} on http://{host}:{port}")
    serve(cfg, host, port)
