"""What `rlrm parity reward` leaves behind, `scores.parquet` (one row per sample) and `summary.json`, and the
table it prints.

    write_reward_parity(out_dir, samples, result)
    console.print(reward_table(result))
"""

from __future__ import annotations

import json
from pathlib import Path

from rlrm.json_values import json_safe
from rlrm.parity.report import shown_number, shown_percent

REWARD_SCORE_COLUMNS = (
    "sample_id",
    "group_id",
    "a_score",
    "b_score",
    "abs_diff",
    "a_adv",
    "b_adv",
    "within_tolerance",
    "a_error",
    "b_error",
)


def write_reward_parity(out_dir: Path, samples, result) -> None:
    """scores.parquet and summary.json in `out_dir`, each written whole (a temporary file, then renamed)."""
    import pandas as pd

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cmp = result.comparison
    frame = pd.DataFrame(
        {
            "sample_id": [s.sample_id for s in samples],
            "group_id": [s.group_id for s in samples],
            "a_score": result.a.scores,
            "b_score": result.b.scores,
            "abs_diff": cmp.abs_diff,
            "a_adv": cmp.loop_adv,  # compare() holds B as its path under test, A as its reference
            "b_adv": cmp.legacy_adv,
            "within_tolerance": cmp.within_tolerance,
            "a_error": [result.a.errors.get(i) for i in range(len(samples))],
            "b_error": [result.b.errors.get(i) for i in range(len(samples))],
        }
    )
    tmp = out_dir / "scores.parquet.tmp"
    frame.to_parquet(tmp, index=False)
    tmp.replace(out_dir / "scores.parquet")
    tmp = out_dir / "summary.json.tmp"
    tmp.write_text(json.dumps(json_safe(result.summary), indent=2) + "\n")
    tmp.replace(out_dir / "summary.json")


def reward_table(result):
    """The headline numbers as a rich Table: both contracts and what differs, agreement, ranks, advantages,
    failures and judge cost per side, and why the verdict failed."""
    from rich.table import Table

    s, st = result.summary, result.summary["stats"]
    verdict = "[green]PASS[/green]" if result.passed else "[red]FAIL[/red]"
    table = Table(title=f"Reward parity: side A vs side B: {verdict}")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    a, b, diff = s["a"], s["b"], s["differs"]["contract"]
    rows = [
        ("side A", f"{a['origin']}: {a['kind']}{_model(a)}, contract {a['contract']['fingerprint'][:12]}"),
        ("side B", f"{b['origin']}: {b['kind']}{_model(b)}, contract {b['contract']['fingerprint'][:12]}"),
        ("settings that differ", ", ".join(s["differs"]["settings"]) or "none"),
        ("contract parts that differ", "; ".join(diff["changes"]) or "none (the same contract)"),
        ("samples / groups", f"{s['samples']} / {s['groups']}"),
        ("failed (A / B)", f"{a['failures']} / {b['failures']} (allowed {shown_percent(s['tolerances']['max_failed_frac'])})"),
        *_agreement_rows(s["agreement"]),
        ("abs diff mean / p99 / max", f"{shown_number(st['abs_diff_mean'])} / {shown_number(st['abs_diff_p99'])} / {shown_number(st['abs_diff_max'])}"),
        ("outside tolerance", f"{st['outside_tolerance']} (atol {s['tolerances']['atol']:g}, rtol {s['tolerances']['rtol']:g}, allowed {shown_percent(s['tolerances']['max_outside_frac'])})"),
        ("Pearson / Spearman", f"{shown_number(st['pearson'], 5)} / {shown_number(st['spearman'], 5)} (min {s['tolerances']['min_spearman']:g})"),
        ("within-group Pearson", f"{shown_number(st['group_pearson'], 5)} (min {s['tolerances']['min_group_pearson']:g})"),
        ("groups flipping rank (resolved / strict)", f"{st['rank_flip_groups']} / {st['rank_flip_groups_strict']} (max {s['tolerances']['max_rank_flips']})"),
        ("GRPO adv: max / mean abs diff", f"{shown_number(st['adv_max_abs_diff'])} / {shown_number(st['adv_mean_abs_diff'])}"),
        ("GRPO adv sign agreement", shown_percent(st["adv_sign_agreement"])),
        ("judge calls (A / B)", f"{_n(a['judge']['calls'])} / {_n(b['judge']['calls'])}"),
        ("judge tokens in+out (A / B)", f"{_tokens(a['judge'])} / {_tokens(b['judge'])}"),
        ("samples/s (A / B)", f"{a['samples_per_s']:.1f} / {b['samples_per_s']:.1f}"),
    ]  # fmt: skip
    for name, value in rows:
        table.add_row(name, value)
    for note in s["notes"]:
        table.add_row("note", note)
    for reason in result.reasons:
        table.add_row("[red]fails[/red]", reason)
    return table


def _agreement_rows(agreement: dict) -> list[tuple[str, str]]:
    rows = [("exact agreement", f"{shown_percent(agreement['exact'])} of {agreement['compared']} scored by both")]
    binary = agreement["binary"]
    if binary is not None:
        (ll, lh), (hl, hh) = binary["confusion"]
        low, high = binary["levels"][0], binary["levels"][-1]
        rows += [
            (
                "verdict agreement / Cohen's kappa",
                f"{shown_percent(binary['rate'])} / {shown_number(binary['kappa'], 3)}",
            ),
            (
                f"A {high:g} & B {high:g} / A {low:g} & B {low:g}",
                f"{hh} / {ll}",
            ),
            (f"A {high:g} & B {low:g} / A {low:g} & B {high:g}", f"{hl} / {lh}"),
        ]
    return rows


def _model(side: dict) -> str:
    return f" {side['model']}" if side["model"] else ""


def _n(value) -> str:
    return f"{int(value):d}"


def _tokens(judge: dict) -> str:
    return f"{int(judge['prompt_tokens'])}+{int(judge['completion_tokens'])}"
