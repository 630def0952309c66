"""`rlrm models prepare`: build the tiny offline models that `tiny-*` profiles use."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rlrm.cli.common import friendly_errors

app = typer.Typer(help="Build and locate offline tiny models.", no_args_is_help=True)


@app.command("prepare")
@friendly_errors
def prepare(
    name: Annotated[list[str], typer.Option("--name", help="Tiny model(s) to build.")] = ["policy"],
    cache_dir: Annotated[
        Optional[Path], typer.Option("--cache-dir", help="Where models live (default: $RLRM_MODELS_DIR or ~/.cache/rlrm/models).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Build seed (same seed, same weights).")] = 0,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if present.")] = False,
) -> None:
    """Train a tokenizer and a tiny Qwen2 policy locally, then warm-start it on the synthetic task."""
    from rlrm.engine.models.tiny import prepare_tiny

    paths = prepare_tiny(tuple(name), cache_dir=cache_dir, seed=seed, force=force, log=typer.echo)
    for model_name, path in paths.items():
        typer.echo(f"{model_name}: {path}")
