"""The `rlrm` command: wires the command groups together, nothing else.

    rlrm --help
"""

from __future__ import annotations

import typer

from rlrm.cli import bench, doctor, launch, models, parity, profiles, report, train

app = typer.Typer(
    name="rlrm",
    help="Launch, benchmark and validate reward setups for LLM reinforcement learning.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("train")(train.train)
app.command("doctor")(doctor.doctor)
app.command("report")(report.report)
app.add_typer(profiles.app, name="profiles")
app.add_typer(models.app, name="models")
app.add_typer(launch.app, name="launch")
app.add_typer(bench.app, name="bench")
app.add_typer(parity.app, name="parity")


def main() -> None:
    app()
