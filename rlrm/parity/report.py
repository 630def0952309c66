"""What a parity run leaves behind: `scores.parquet` and `summary.json` per compared pair, and the
rich tables printed at the end.

    write_cell(out_dir, samples, cell)     # out_dir/scores.parquet, out_dir/summary.json
    write_matrix(out_dir, samples, cells)  # one folder per pair + matrix.json
    console.print(summary_table(cell)); console.print(matrix_table(cells))
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from rlrm.json_values import json_safe

SCORE_COLUMNS = (
    "sample_id",
    "group_id",
    "legacy_score",
    "loop_score",
    "abs_diff",
    "rel_diff",
    "legacy_adv",
    "loop_adv",
    "truncated",
)


def write_cell(out_dir: Path, samples, cell, extra: dict | None = None) -> None:
    """One row per sample in scores.parquet; every statistic, tolerance and the verdict in summary.json."""
    import pandas as pd

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cmp = cell.comparison
    frame = pd.DataFrame(
        {
            "sample_id": [s.sample_id for s in samples],
            "group_id": [s.group_id for s in samples],
            "legacy_score": cell.legacy.scores,
            "loop_score": cell.loop.scores,
            "abs_diff": cmp.abs_diff,
            "rel_diff": cmp.rel_diff,
            "legacy_adv": cmp.legacy_adv,
            "loop_adv": cmp.loop_adv,
            "truncated": np.asarray(cell.legacy.truncated, dtype=bool),
            "within_tolerance": cmp.within_tolerance,
            "loop_error": [cell.loop.errors.get(i) for i in range(len(samples))],
        }
    )
    frame.to_parquet(out_dir / "scores.parquet", index=False)
    summary = {**cell.summary, **(extra or {})}
    (out_dir / "summary.json").write_text(json.dumps(json_safe(summary), indent=2) + "\n")


def write_matrix(out_dir: Path, samples, cells, extra: dict | None = None) -> None:
    """Each pair in `<legacy>-vs-<loop>/`, and the grid of verdicts in matrix.json."""
    out_dir = Path(out_dir)
    for cell in cells:
        write_cell(out_dir / f"legacy-{cell.legacy_dtype}-vs-loop-{cell.loop_dtype}", samples, cell, extra)
    grid = [
        {
            "legacy_dtype": c.legacy_dtype,
            "loop_dtype": c.loop_dtype,
            "verdict": c.summary["verdict"],
            "reasons": c.reasons,
            **{k: c.summary["stats"][k] for k in ("abs_diff_max", "spearman", "rank_flip_groups")},
        }
        for c in cells
    ]
    (out_dir / "matrix.json").write_text(json.dumps(json_safe({"cells": grid, **(extra or {})}), indent=2) + "\n")


def summary_table(cell):
    """The headline numbers of one pair as a rich Table."""
    from rich.table import Table

    s, st = cell.summary, cell.summary["stats"]
    verdict = "[green]PASS[/green]" if cell.passed else "[red]FAIL[/red]"
    table = Table(
        title=f"DisRM parity: legacy FSDP2 {cell.legacy_dtype} (world size {s['world_size']}) vs reward loop {cell.loop_dtype}: {verdict}"
    )
    table.add_column("statistic")
    table.add_column("value", justify="right")
    tol = s["tolerances"]
    rows = [
        ("samples / groups", f"{s['samples']} / {s['groups']}"),
        ("truncated to max_length", f"{s['truncated']} (max_length {s['max_length']}, {s['truncation']})"),
        ("abs diff mean / p50", f"{shown_number(st['abs_diff_mean'])} / {shown_number(st['abs_diff_p50'])}"),
        ("abs diff p99 / max", f"{shown_number(st['abs_diff_p99'])} / {shown_number(st['abs_diff_max'])}"),
        ("rel diff max", shown_number(st["rel_diff_max"])),
        (
            "outside tolerance",
            f"{st['outside_tolerance']} (atol {tol['atol']:g}, rtol {tol['rtol']:g} of scale {shown_number(st['score_scale'])}, allowed {shown_percent(tol['max_outside_frac'])})",
        ),
        ("non-finite (legacy / loop)", f"{st['nonfinite_legacy']} / {st['nonfinite_loop']}"),
        (
            "Pearson / Spearman",
            f"{shown_number(st['pearson'], 5)} / {shown_number(st['spearman'], 5)} (min {tol['min_spearman']:g})",
        ),
        (
            "within-group Pearson",
            f"{shown_number(st['group_pearson'], 5)} (min {tol['min_group_pearson']:g})",
        ),
        (
            "Kendall tau per group: mean / min",
            f"{shown_number(st['kendall_tau_mean'], 4)} / {shown_number(st['kendall_tau_min'], 4)}",
        ),
        (
            "top-1 agreement (ties / strict)",
            f"{shown_percent(st['top1_agreement'])} / {shown_percent(st['top1_agreement_strict'])}",
        ),
        (
            "groups flipping rank (resolved / strict)",
            f"{st['rank_flip_groups']} / {st['rank_flip_groups_strict']} (max {tol['max_rank_flips']})",
        ),
        ("groups tied within the band / constant", f"{st['constant_groups']} / {st['constant_groups_strict']}"),
        (
            "GRPO adv: max / mean abs diff",
            f"{shown_number(st['adv_max_abs_diff'])} / {shown_number(st['adv_mean_abs_diff'])}",
        ),
        ("GRPO adv sign agreement", shown_percent(st["adv_sign_agreement"])),
        ("samples/s: legacy / loop", f"{s['legacy']['samples_per_s']:.1f} / {s['loop']['samples_per_s']:.1f}"),
    ]
    inv = s.get("invariance")
    if inv:
        rows.append(
            (
                "invariance: batch 1 / 8 / max, right / left pad",
                (
                    f"{'pass' if inv['passed'] else 'FAIL'}: max {shown_number(inv['max_abs_diff'])}, p99 {shown_number(inv['p99_abs_diff'])}, "
                    f"{inv['rank_flips']} rank flips (tolerance {shown_number(inv['tolerance'])})"
                ),
            )
        )
    for name, value in rows:
        table.add_row(name, value)
    for reason in cell.reasons:
        table.add_row("[red]fails[/red]", reason)
    return table


def matrix_table(cells):
    """Verdict and headline numbers of every (legacy dtype, loop dtype) pair."""
    from rich.table import Table

    table = Table(title="DisRM parity matrix (legacy FSDP2 dtype x reward-loop dtype)")
    for name in ("legacy", "loop", "verdict", "max abs diff", "p99 abs diff", "Spearman", "rank flips", "adv max diff"):
        table.add_column(name, justify="right" if name not in ("legacy", "loop", "verdict") else "left")
    for c in cells:
        st = c.summary["stats"]
        table.add_row(
            c.legacy_dtype,
            c.loop_dtype,
            "[green]pass[/green]" if c.passed else "[red]fail[/red]",
            shown_number(st["abs_diff_max"]),
            shown_number(st["abs_diff_p99"]),
            shown_number(st["spearman"], 5),
            str(st["rank_flip_groups"]),
            shown_number(st["adv_max_abs_diff"]),
        )
    return table


def shown_number(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}g}" if abs(value) < 1e-3 and value != 0 else f"{value:.{digits + 1}f}"


def shown_percent(value) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{100 * value:.1f}%"
