"""`rlrm profiles list|show`: the built-in training setups."""

from __future__ import annotations

from typing import Annotated

import typer

from rlrm.cli.common import console, friendly_errors
from rlrm.cli.options import SetOption

app = typer.Typer(help="List and show profiles (YAML training setups).", no_args_is_help=True)


@app.command("list")
@friendly_errors
def list_() -> None:
    """Each profile with its one-line description."""
    from rich.table import Table

    from rlrm.config.loader import list_profiles

    table = Table("profile", "description")
    for name, description in list_profiles().items():
        table.add_row(name, description)
    console().print(table)


@app.command("show")
@friendly_errors
def show(name: Annotated[str, typer.Argument(help="Profile name or YAML path.")], set_: SetOption = []) -> None:
    """The resolved profile (after `extends:` and overrides) as YAML."""
    from rlrm.config.loader import dump_profile, load_profile

    typer.echo(dump_profile(load_profile(name, set_)), nl=False)
