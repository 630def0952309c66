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
    role: Annotated[
        str,
        typer.Option(
            help="policy (rollout server: POST /generate with input_ids, POST /update_weights_from_disk, GET /get_model_info; "
            "use it as rollout.server.addresses), genrm (judge) or disrm (sequence classifier)."
        ),
    ] = "genrm",
    host: Annotated[str, typer.Option(help="Address to bind (loopback unless you mean otherwise).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    dtype: Annotated[str, typer.Option(help="float32, bfloat16 or float16.")] = "float32",
    max_batch: Annotated[int, typer.Option(help="Most requests in one batched forward.", min=1)] = 64,
    max_queue: Annotated[
        int, typer.Option(help="Embedded: queued requests beyond which the server answers 503.", min=1)
    ] = 1024,
    api_key: Annotated[
        Optional[str],
        typer.Option(
            envvar="RLRM_API_KEY",
            help="Require 'Authorization: Bearer KEY'. On a command line every local user can read it (ps): "
            "prefer RLRM_API_KEY or --api-key-env.",
        ),
    ] = None,
    api_key_env: Annotated[Optional[str], typer.Option(help="Read the API key from this environment variable.")] = None,
    served_model_name: Annotated[Optional[str], typer.Option(help="Name reported by /v1/models.")] = None,
    backend: Annotated[str, typer.Option(help="embedded (transformers), vllm or sglang.")] = "embedded",
    device: Annotated[
        str, typer.Option(help="Embedded: auto (a GPU when there is one), cpu, cuda or cuda:N.")
    ] = "auto",
    compile: Annotated[
        str,
        typer.Option(
            help="Embedded generation (policy, genrm): off, cudagraphs (GPU: a static KV cache, each decode step "
            "a CUDA graph) or inductor (torch.compile), as rollout.compile does in process."
        ),
    ] = "off",
    tf32: Annotated[
        bool,
        typer.Option(
            "--tf32",
            metavar="",
            help="Embedded, on a GPU at float32: matrix products in TF32 on the tensor cores, as model.tf32 does "
            "for the trainer.",
        ),
    ] = False,
    batch_wait_ms: Annotated[
        Optional[float],
        typer.Option(
            help="Embedded generation: the longest a batch waits for more requests after its first (default 2; a "
            "policy or judge server rlrm launches waits its section's batch_wait_ms, 100).",
            min=0,
        ),
    ] = None,
    batch_gap_ms: Annotated[
        Optional[float],
        typer.Option(
            help="Embedded generation: close a batch sooner once no request arrived for this long (a policy or "
            "judge server rlrm launches: its section's batch_gap_ms, 5).",
            min=0,
        ),
    ] = None,
    start_timeout: Annotated[
        float, typer.Option(help="Seconds a vllm/sglang server may take to become healthy.")
    ] = 600.0,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", metavar="", help="Print what would be served (the vllm/sglang command) and stop."),
    ] = False,
    weights_dir: Annotated[
        Optional[str],
        typer.Option(
            help="Policy role, embedded: the only folder POST /update_weights_from_disk loads from (besides the "
            "model's own folder); a folder only you can write, and the trainer's rollout.server.weights_dir."
        ),
    ] = None,
    allow_unauthenticated: Annotated[
        bool,
        typer.Option(
            "--allow-unauthenticated",
            metavar="",
            help="Serve on an address other than loopback without an API key (anyone who reaches it can use it).",
        ),
    ] = False,
) -> None:
    """Serve a model in the foreground (Ctrl-C stops it): embedded, or a vLLM / SGLang process."""
    from rlrm.engine.models.tiny import resolve_model_path
    from rlrm.errors import ConfigError
    from rlrm.inference.loading import check_model_folder
    from rlrm.launch.common.auth import check_bind, key_from_env
    from rlrm.launch.common.ports import check_port, ensure_port_free
    from rlrm.launch.common.roles import Role
    from rlrm.launch.fleet.backends import backend_for
    from rlrm.launch.server.app import serve
    from rlrm.launch.server.backends import ServerConfig

    check_port(port)
    engine, served_role = backend_for(backend), Role.parse(role)
    if api_key_env:
        api_key = key_from_env(api_key_env, "--api-key-env")
    embedded_only = {
        "--compile": compile != "off",
        "--device": device != "auto",
        "--tf32": tf32,
        "--batch-wait-ms": batch_wait_ms is not None,
        "--batch-gap-ms": batch_gap_ms is not None,
        "--weights-dir": weights_dir is not None,  # the only folder the embedded server loads from: never dropped
        "--max-queue": max_queue != 1024,
    }
    given = next((flag for flag, set_ in embedded_only.items() if set_), None)
    if engine.external and given:
        raise ConfigError(
            f"{given} is the embedded server's; {backend} places its model, picks its kernels, batches its requests "
            f"and captures its CUDA graphs itself: drop {given}"
        )
    if engine.external:
        return _external(
            engine,
            resolve_model_path(model),  # tiny:NAME is rlrm's alias: vLLM and SGLang get its folder
            served_role,
            host,
            port,
            dtype,
            max_batch,
            api_key,
            served_model_name or model,  # clients ask for the name given, as the embedded server answers
            start_timeout,
            dry_run,
            allow_unauthenticated,
            key_shown=(f"${api_key_env}" if api_key_env else "$RLRM_API_KEY") if api_key else None,
        )
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ConfigError(f"unknown dtype {dtype!r}; use float32, bfloat16 or float16")
    ensure_port_free(host, port)  # before the model loads: a wrong --host or --port fails in a second
    check_bind(host, api_key, allow_unauthenticated)
    cfg = ServerConfig(  # checks --device and --compile at once, before a tiny:NAME model is built
        model_path=model,
        role=served_role,
        dtype=dtype,
        max_batch=max_batch,
        max_queue=max_queue,
        api_key=api_key,
        served_model_name=served_model_name or model,
        device=device,
        compile=compile,
        weights_dir=weights_dir,
        tf32=tf32,
        batch_wait_ms=ServerConfig.batch_wait_ms if batch_wait_ms is None else batch_wait_ms,
        batch_gap_ms=batch_gap_ms,
    )
    if dry_run:  # nothing built, loaded or served
        shown = " ".join(f"{k}={getattr(v, 'value', v)}" for k, v in vars(cfg).items() if k != "api_key")
        typer.echo(f"would serve {model} as {role} on http://{host}:{port} with the embedded server: {shown}")
        return
    cfg.model_path = resolve_model_path(model)
    check_model_folder(cfg.model_path, "--model")  # a folder that holds no model: one line, before "serving"
    typer.echo(f"serving {model} as {role} on http://{host}:{port}")
    serve(cfg, host, port, allow_unauthenticated=allow_unauthenticated)


def _external(
    backend,
    model,
    role,
    host,
    port,
    dtype,
    max_batch,
    api_key,
    served_model_name,
    start_timeout,
    dry_run,
    allow_unauthenticated=False,
    key_shown: str | None = None,
) -> None:
    """Start vLLM or SGLang as an owned process, wait for /health, keep it up until Ctrl-C. `key_shown`: what
    `--dry-run` prints in place of the key (SGLang takes it on its command line), as `rlrm train --dry-run` does."""
    import shlex
    import time

    from rlrm.launch.common.auth import check_bind
    from rlrm.launch.common.ports import ensure_port_free
    from rlrm.launch.fleet.backends import ReplicaLaunch, engine_device
    from rlrm.launch.fleet.process import ServerProcess

    def launch_with(key: str | None) -> ReplicaLaunch:
        device = engine_device()
        return ReplicaLaunch(
            backend,
            model,
            role,
            dtype=dtype,
            max_batch=max_batch,
            api_key=key,
            served_model_name=served_model_name,
            device=device,
        )

    if dry_run:
        typer.echo(shlex.join(launch_with(key_shown).argv(host, port)))
        return
    launch = launch_with(api_key)
    argv = launch.argv(host, port)
    ensure_port_free(host, port)  # before the engine is looked for or started: a taken port fails in a second
    backend.require()
    check_bind(host, api_key, allow_unauthenticated)
    env = launch.env(0)
    server = ServerProcess(argv, host=host, port=port, start_timeout_s=start_timeout, env=env)
    try:
        server.start()
        if server.proc is None:  # start() launched it
            raise RuntimeError(f"{backend} was started but holds no process")
        typer.echo(f"{backend} serving {model} as {role} on {server.url} (pid {server.proc.pid})")
        while server.alive():
            time.sleep(1.0)
        typer.echo(f"{backend} exited with code {server.exit_code()}: {server.why()}")
        raise typer.Exit(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
