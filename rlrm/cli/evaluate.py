"""`rlrm eval rm`: pairwise accuracy of a profile's reward on chosen/rejected pairs.

rlrm eval rm --profile tiny-disrm --pairs ~/.cache/rlrm/models/pairs-v3-seed0.jsonl
rlrm eval rm --profile tiny-genrm --pairs pairs.jsonl --json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from rlrm.cli.common import console, friendly_errors
from rlrm.cli.options import ProfileOption, SetOption
from rlrm.errors import clipped
from rlrm.json_values import json_safe

app = typer.Typer(help="Measure a reward setup on labelled data.", no_args_is_help=True)


@app.command("rm", short_help="Pairwise accuracy of the reward on chosen/rejected pairs.")
@friendly_errors
def rm(
    pairs: Annotated[
        Path,
        typer.Option(
            "--pairs", help="RewardBench-shaped .jsonl: prompt, chosen, rejected, optional subset (and ground_truth)."
        ),
    ],
    profile: ProfileOption = None,
    overrides: SetOption = [],
    limit: Annotated[
        Optional[int],
        typer.Option("--limit", help="Score only the file's first N pairs (identical ones skipped).", min=1),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print JSON instead of a table.")] = False,
    seed: Annotated[Optional[int], typer.Option("--seed", hidden=True)] = None,  # the bootstrap's, until stop 54
) -> None:
    """Score every chosen and rejected response with the profile's reward (default tiny-disrm), through the
    reward loop and servers training uses, all at once (the loop's workers and concurrency), and print
    pairwise accuracy per subset and overall with a Wilson 95% interval. Ties are not wins and are counted
    apart, so are failed scores (left out of the accuracy); pairs with identical chosen and rejected are
    skipped with a warning. When every pair failed (e.g. a judge that is down), exits 1 naming the first error."""
    from rlrm.config.loader import load_profile
    from rlrm.reward_checks.pairs import accuracy_table, read_pairs, score_pairs

    if seed is not None:  # a script written for the bootstrap interval keeps working, and is told
        print("warning: --seed is ignored: the intervals are Wilson's, which draw nothing; drop it", file=sys.stderr)
    resolved = load_profile(profile or "tiny-disrm", overrides)
    rows, identical = read_pairs(pairs, limit)
    if identical:
        print(
            f"warning: {len(identical)} pair(s) with identical chosen and rejected skipped "
            f"({', '.join(identical[:5])}{', ...' if len(identical) > 5 else ''})",
            file=sys.stderr,
        )
    scored = score_pairs(resolved.reward, rows)
    cut = [s.pair.id for s in scored if s.truncated]
    if cut:  # scored on what was kept: say so rather than let a cut prompt pass silently
        print(
            f"warning: {len(cut)} pair(s) scored on conversations cut to reward.disrm.max_length="
            f"{resolved.reward.disrm.max_length} tokens, or to the DisRM's positions where it has fewer (said above) "
            f"({', '.join(cut[:5])}{', ...' if len(cut) > 5 else ''}); raise the one that cut them to score them whole",
            file=sys.stderr,
        )
    failed = [s for s in scored if s.error]
    if failed:  # left out of the accuracy: say why, as audit and inspect do
        print(
            f"warning: {len(failed)} pair(s) failed to score and are left out of the accuracy; the first (pair "
            f"{failed[0].pair.id}): {clipped(failed[0].error, 200)}",
            file=sys.stderr,
        )
    table = accuracy_table(scored)
    if as_json:
        typer.echo(
            json.dumps(
                json_safe(  # JSON has no NaN: a subset with no scored pair has null accuracy
                    {
                        "pairs_file": str(pairs),
                        "reward": resolved.reward.kind,
                        "model": resolved.reward.server.model,
                        "identical_skipped": len(identical),
                        "subsets": table,
                    }
                ),
                indent=2,
                allow_nan=False,
            )
        )
        return
    _print(table, f"{resolved.reward.kind} {resolved.reward.server.model or ''}".strip(), len(identical))


def _print(table: list[dict], what: str, identical: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    skipped = f" ({identical} identical pairs skipped)" if identical else ""
    out = Table(title=escape(f"pairwise accuracy of {what}{skipped}"))  # names are text, never rich markup
    for name in ("subset", "pairs", "won", "ties", "lost", "failed", "accuracy", "95% interval"):
        out.add_column(name, justify="left" if name == "subset" else "right")
    for r in table:
        out.add_row(
            escape(r["subset"]),
            str(r["pairs"]),
            str(r["won"]),
            str(r["ties"]),
            str(r["lost"]),
            str(r["failed"]),
            _fmt(r["accuracy"]),
            "-" if math.isnan(r["ci95_low"]) else f"{r['ci95_low']:.3f} - {r['ci95_high']:.3f}",
        )
    console().print(out)


def _fmt(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"
