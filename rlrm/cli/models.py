"""`rlrm models prepare`: build the tiny offline models that `tiny-*` profiles use."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rlrm.cli.common import friendly_errors
from rlrm.cli.options import SeedOption, given

app = typer.Typer(help="Build the offline tiny models (rlrm models prepare).", no_args_is_help=True)


@app.command("prepare", short_help="Put the tiny policy, judge and DisRM in the model cache.")
@friendly_errors
def prepare(
    name: Annotated[
        Optional[list[str]],
        typer.Option("--name", help="Tiny model(s) to build: policy, judge, disrm, tools (default: the first three)."),
    ] = None,
    cache_dir: Annotated[
        Optional[Path],
        typer.Option("--cache-dir", help="Where models live (default: $RLRM_MODELS_DIR or ~/.cache/rlrm/models)."),
    ] = None,
    seed: SeedOption = 0,
    force: Annotated[bool, typer.Option("--force", metavar="", help="Rebuild even if present.")] = False,
) -> None:
    """Put the tiny policy, judge and DisRM in the model cache and print what each measured on held-out data:
    seed 0 ships with rlrm and is copied; --force or another --seed builds from the recipe (minutes; the same seed
    builds the same weights on the same machine and torch build, and other CPUs' kernels round differently, so a
    rebuild's figures differ from the shipped files'). Also writes pairs-v<recipe>-seed<S>.jsonl next to them: chosen/rejected pairs of
    held-out problems for `rlrm eval rm --pairs`.

    The policy is a tiny Qwen2 warm-started on the synthetic task; the judge (GenRM) and the DisRM
    start from it and are trained briefly to tell correct answers from wrong ones. `--name tools`
    builds the tool-use variant of the tiny-tools profile: the policy taught to call the calculator.
    """
    from rlrm.engine.models.pairs_file import write_pairs_file
    from rlrm.engine.models.tiny import DEFAULT_MODELS, default_cache_dir, prepare_tiny, summary

    names = tuple(name) if name else DEFAULT_MODELS
    seed = given(seed, "--seed")
    paths = prepare_tiny(names, cache_dir=cache_dir, seed=seed, force=force, log=typer.echo)
    for model_name, path in paths.items():
        typer.echo(f"{model_name}: {path}  {summary(model_name, path)}")
    pairs = write_pairs_file(cache_dir or default_cache_dir(), seed)
    typer.echo(f"pairs: {pairs}  (rlrm eval rm --profile tiny-disrm --pairs {pairs})")
