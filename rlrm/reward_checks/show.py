"""How `rlrm inspect reward` prints: one rich table per sample, then the lints (or JSON with --json).

Text from the reward's input is shown as plain text (never as rich markup), with each newline
marked `\\n` so that where one ends the rendering is visible; special tokens are printed as the text
the tokenizer gives them (`<|im_end|>`).
"""

from __future__ import annotations

import json

from rlrm.json_values import json_safe

SHOW_CHARS = 1200  # longer texts are cut in the table (the JSON has them whole)


def visible(text: str | None) -> str:
    if text is None:
        return "-"
    shown = text if len(text) <= SHOW_CHARS else f"... ({len(text) - SHOW_CHARS} chars) " + text[-SHOW_CHARS:]
    return shown.replace("\n", "\\n\n").rstrip("\n")  # a final newline stays visible as \n, without an empty line


def _capped(text: str) -> str:
    """`text` as a repr, at most SHOW_CHARS of it, saying how much is cut (a 1 MB response removes 19k lines)."""
    if len(text) <= SHOW_CHARS:
        return repr(text)
    lines = text[SHOW_CHARS:].count("\n")
    return f"{text[:SHOW_CHARS]!r} ... ({len(text) - SHOW_CHARS} more chars, {lines} more lines, cut here; --json has them)"


def sample_rows(r: dict) -> list[tuple[str, str]]:
    """(field, value) rows of one inspected sample."""
    rows = [("prompt (last turn)", visible(r["prompt"][-1]["content"])), ("response", visible(r["response"]))]
    if r.get("ground_truth"):
        rows.append(("ground truth", r["ground_truth"]))
    if r.get("turns"):
        rows.append((f"trajectory ({r['num_turns']} turns, as {{turns}})", visible(r["turns"])))
    if "rendered_text" in r:
        cut = r["truncation"]
        rows += [
            ("rendered for the DisRM", visible(r["rendered_text"])),
            ("tokens", f"{r['tokens']} (max_length {r['max_length']})"),
            (
                "truncation",
                f"{cut['tokens_removed']} tokens removed from the {cut['side']}: {_capped(cut['removed_text'])}"
                if cut
                else "none",
            ),
            (
                "score token",
                f"{r['score_token']['text']!r} (token {r['score_token']['token']!r}, id {r['score_token']['id']}, "
                f"position {r['score_token']['position']}: the last one)"
                if r.get("score_token")
                else "-",
            ),
            ("raw score (float32)", r["raw_score_float32"] or "-"),
        ]
    if "judge_prompt_text" in r:
        usage = r.get("usage") or {}
        rows += [
            ("judge prompt as sent", visible(r["judge_prompt_text"])),
            ("verdict", visible(r["verdict"])),
            (
                "parsed score",
                f"{r['parsed_score']:g}" if r["parsed_score"] is not None else f"none: {r['parse_error']}",
            ),
            (
                "finish / tokens",
                (
                    f"{r['finish_reason']} / prompt {usage.get('prompt_tokens', '-')}, "
                    f"completion {usage.get('completion_tokens', '-')} (max_tokens {r.get('max_tokens', '-')})"
                ),
            ),
        ]
    if "extracted_answer" in r:
        how = r.get("method", r.get("rule"))  # gsm8k's method, or the math rule (its last \boxed{})
        rows.append(("rule: extracted answer", f"{r['extracted_answer']!r} ({how}) -> {r['rule_score']:g}"))
    if r.get("extra") and not any(k in r for k in ("rendered_text", "judge_prompt_text", "extracted_answer")):
        rows.append(("reward_extra_info", ", ".join(f"{k}={v}" for k, v in r["extra"].items())))
    if r.get("extra", {}).get("turn_scores"):
        rows.append(("turn scores", ", ".join(f"{v:.6g}" for v in r["extra"]["turn_scores"])))
    rows.append(("reward", f"{r['score']:.6g}" if r["score"] is not None else f"failed: {r['error']}"))
    return rows


def print_report(report, console) -> None:
    from rich.table import Table
    from rich.text import Text

    for note in report.notes:
        console.print(Text(note), style="yellow")
    if report.contract is not None:
        console.print(Text(contract_line(report.contract)))
    for r in report.records:
        table = Table(title=Text(f"sample {r['index']} ({r['uid']}) - {report.kind}"), show_header=False, expand=False)
        table.add_column("field", style="bold", no_wrap=True)
        table.add_column("value", overflow="fold")
        for name, value in sample_rows(r):
            table.add_row(name, Text(value))
        console.print(table)
    if report.invariance is not None:
        console.print(invariance_table(report.invariance))
    if not report.findings:
        console.print(Text(f"lints: none triggered on {len(report.records)} samples"), style="green")
        return
    table = Table(title="lints")
    for name in ("lint", "severity", "samples", "message"):
        table.add_column(name, overflow="fold")
    for f in report.findings:
        table.add_row(f["lint"], f["severity"], ", ".join(map(str, f["samples"])) or "-", Text(f["message"]))
    console.print(table)


def contract_line(contract: dict) -> str:
    """`reward contract 3f2a9c01b7e4 (kind, model, ...)`: the fingerprint a run with this reward records."""
    named = ", ".join(name for name, value in contract["parts"].items() if value not in (None, {}, []))
    return f"reward contract {contract['fingerprint'][:12]} (of {named}; the run folder's reward_contract.json)"


def invariance_table(inv: dict):
    """The score-invariance check as a rich table (shared with `rlrm parity disrm`)."""
    from rich.table import Table

    verdict = "[green]PASS[/green]" if inv["passed"] else "[red]FAIL[/red]"
    table = Table(
        title=f"score invariance ({inv['samples']} samples, {inv['dtype']}, tolerance {inv['tolerance']:.3g}): {verdict}"
    )
    for name in ("against one at a time", "max abs diff", "p99 abs diff", "rank flips", "within tolerance"):
        table.add_column(name, justify="left" if name.startswith("against") else "right")
    for c in inv["comparisons"]:
        table.add_row(
            c["name"],
            f"{c['max_abs_diff']:.3g}",
            f"{c['p99_abs_diff']:.3g}",
            str(c["rank_flips"]),
            "yes" if c["passed"] else "[red]no[/red]",
        )
    return table


def to_json(report) -> str:
    return json.dumps(json_safe(report.as_dict()), indent=2, default=str)  # NaN: null, as strict JSON has it
