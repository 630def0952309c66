"""Options that several commands share, declared once (Typer's `Annotated` aliases).

    def train(profile: ProfileOption = None, set_: SetOption = [], seed: SeedOption = None): ...

A command gives its own default; where the default folder or seed needs saying, its docstring says it.
"""

from __future__ import annotations

from typing import Annotated, Optional, TypeVar

import typer

from rlrm.errors import ConfigError

T = TypeVar("T")

ProfileOption = Annotated[
    Optional[str], typer.Option("--profile", "-p", help="Profile name or YAML path (see `rlrm profiles list`).")
]
SetOption = Annotated[
    list[str], typer.Option("--set", help="Override a profile value, e.g. --set actor.lr=2e-4 (repeatable).")
]
StepsOption = Annotated[
    Optional[int], typer.Option("--steps", help="Training steps of a run (trainer.total_steps).", min=1)
]
SeedOption = Annotated[
    Optional[int],
    typer.Option("--seed", help="Seed: the same seed gives the same numbers.", min=0, max=2**63 - 1),
]

DryRunOption = Annotated[bool, typer.Option("--dry-run", metavar="", help="Print the resolved settings and stop.")]


def given(value: T | None, flag: str) -> T:
    """The value of an option whose command gives it a default other than None (Typer passes that default when the
    option is left out, so None never arrives; the shared aliases above are Optional for the commands whose is)."""
    if value is None:
        raise ConfigError(f"{flag} needs a value")
    return value
