"""`rlrm report`: figures, summary.md and (with --html) one self-contained report.html from
run, benchmark and parity folders.

    rlrm report runs/a runs/b --smooth 0.9 --html
    rlrm report bench/reward-latency --steps 3:5 --format svg
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rlrm.cli.common import friendly_errors, out_or_fresh


@friendly_errors
def report(
    paths: Annotated[
        list[Path],
        typer.Argument(metavar="PATH", help="Run, benchmark or parity folders (kind found from their files)."),
    ],
    out: Annotated[
        Optional[Path],
        typer.Option(
            "--out",
            help="Output folder (default: reports/<time>, -2 after it if taken); an earlier report there is replaced whole, a folder of "
            "other files is refused.",
        ),
    ] = None,
    x: Annotated[str, typer.Option("--x", help="x-axis of curves: step, time (perf/wall_s) or samples.")] = "step",
    smooth: Annotated[float, typer.Option(help="EMA smoothing weight in [0, 1), e.g. 0.9; 0 = off.")] = 0.0,
    metrics: Annotated[
        list[str],
        typer.Option("--metrics", help="Curves of these metrics: globs, repeatable or comma-separated ('actor/*')."),
    ] = [],
    fmt: Annotated[str, typer.Option("--format", help="Figure files: png, svg or pdf.")] = "png",
    html: Annotated[
        bool, typer.Option("--html", metavar="", help="Also write report.html (self-contained, opens offline).")
    ] = False,
    steps: Annotated[Optional[str], typer.Option("--steps", help="Timeline window A:B of steps (default 2:4).")] = None,
) -> None:
    """Plot training curves, benchmark idle ratios and speedups, timelines and parity checks (into --out,
    default reports/<time>)."""
    from rlrm.errors import require_extra
    from rlrm.report.build import ReportOptions, build_report

    require_extra("matplotlib", "report", "rlrm report")
    with out_or_fresh(out, Path("reports")) as folder:  # default: reports/<time>
        options = ReportOptions(out=folder, x=x, smooth=smooth, metrics=list(metrics), fmt=fmt, html=html, steps=steps)
        result = build_report(list(paths), options)
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    figures = len(result.files) - 1 - (result.html is not None)
    extra = f" and {result.html.name}" if result.html else ""
    typer.echo(f"wrote {figures} figures, {result.summary.name}{extra} to {result.out}")
