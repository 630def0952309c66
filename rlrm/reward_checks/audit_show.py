"""How `rlrm audit reward` prints: one rich table (references, then attacks) and the verdict line.

print_audit(result, console)
"""

from __future__ import annotations

import math

EXAMPLE_CHARS = 24  # the example column shows this much of the first problem's response


def example(text: str) -> str:
    return repr(text) if len(text) <= EXAMPLE_CHARS else repr(text[:EXAMPLE_CHARS]) + f"... ({len(text)})"


def _interval(row) -> str:
    return "-" if math.isnan(row.ci95_low) else f"{row.ci95_low:.0%}-{row.ci95_high:.0%}"


def _style(row, result) -> str:
    if row.group != "reference" and not row.counted:
        return "yellow"  # inconclusive: nothing was counted
    over = row.group != "reference" and row.rate > result.settings.max_attack_rate
    if over or row.name in result.references_below:
        return "red"
    return "green" if row.group == "reference" else ""


def print_audit(result, console) -> None:
    from rich.table import Table
    from rich.text import Text

    for note in result.notes:
        console.print(Text(f"note: {note}"), style="yellow")
    what = f"{result.reward} {result.model or ''}".strip()
    table = Table(
        title=Text(
            f"reward audit of {result.profile} ({what}), {result.prompts} held-out prompts; rewarded: score >= "
            f"{result.threshold:g} ({result.threshold_rule})"
        )
    )
    table.add_column("response", no_wrap=True)
    table.add_column("example (first prompt)", overflow="fold", max_width=34)
    for name in ("rewarded", "rate", "95% CI", "mean score"):
        table.add_column(name, justify="right", no_wrap=True)
    if any(row.failed for row in result.references + result.attacks):
        table.add_column("failed", justify="right")
    group = None
    for row in result.references + result.attacks:
        if group is not None and row.group != group:
            table.add_section()
        group = row.group
        style = _style(row, result)
        cells: list[Text | str] = [
            Text(row.name, style=style),
            Text(example(row.example)),
            f"{row.rewarded}/{row.counted}",
            Text("-" if math.isnan(row.rate) else f"{row.rate:.0%}", style=style),
            _interval(row),
            "-" if math.isnan(row.mean_score) else f"{row.mean_score:.3g}",
        ]
        table.add_row(*cells, *([str(row.failed)] if len(table.columns) > len(cells) else []))
    console.print(table)
    console.print(Text(f"reference mean score {result.reference_mean:.3g}; {_counted(result.counters)}"))
    console.print(verdict_line(result), style={"pass": "green", "fail": "red"}.get(result.verdict, "yellow"))


def verdict_line(result) -> str:
    s = result.settings
    if result.passed:
        return (
            f"PASS: every attack rewarded at most {_limit(s.max_attack_rate)}, "
            f"references rewarded at least {_limit(s.min_reference_rate)}"
        )
    why = []
    if result.failed_attacks:
        why.append(f"rewarded above {_limit(s.max_attack_rate)}: {', '.join(result.failed_attacks)}")
    if result.references_below:
        ref = next(r for r in result.references if r.name == "reference")
        why.append(f"reference solutions rewarded {_limit(ref.rate)} < {_limit(s.min_reference_rate)}")
    if result.inconclusive:
        why.append(f"no sample counted (every reward failed, 0/0 proves nothing): {', '.join(result.inconclusive)}")
    return f"{result.verdict.upper()}: " + "; ".join(why)


def _limit(rate: float) -> str:
    """A rate in percent to 4 digits: --max-attack-rate 0.005 is 0.5%, not "0%" (the verdict used the exact value),
    and a reference rate just under its limit does not read as equal to it."""
    return f"{rate * 100:.4g}%"


def _counted(c: dict) -> str:
    parts = [f"{int(c['reward/model_calls'])} reward-model calls"]
    prompt, completion = int(c["reward/judge_prompt_tokens"]), int(c["reward/judge_completion_tokens"])
    if completion:
        parts.append(f"{prompt} prompt + {completion} completion tokens")
    elif prompt:  # a DisRM reads its input and writes nothing
        parts.append(f"{prompt} input tokens")
    if c["reward/cost"]:
        parts.append(f"${c['reward/cost']:.4f}")
    if c["reward/rate_limited"] or c["reward/throttle_wait_s"]:
        parts.append(f"{int(c['reward/rate_limited'])} rate-limited, {c['reward/throttle_wait_s']:.1f} s waited")
    if c["reward/retries"] or c["reward/failures"]:
        parts.append(f"{int(c['reward/retries'])} retries, {int(c['reward/failures'])} failed")
    return "counted: " + ", ".join(parts)
