"""The figure of a reward audit (`rlrm audit reward --out DIR`, read back from DIR/audit.json by `rlrm report`):
the rewarded rate of every reference and attack, with its 95% interval, and the verdict's limits.

    fig = audit_figure(json.loads(Path("audits/x/audit.json").read_text()))
"""

from __future__ import annotations

import math

from rlrm.report.figures import FigureSkipped, new_figure

REFERENCE_COLOR, PASS_COLOR, FAIL_COLOR = "tab:green", "tab:blue", "tab:red"


def audit_figure(data: dict):
    """Horizontal bars: references on top, then attacks; red when over --max-attack-rate (or a reference under)."""
    rows = list(data.get("references", [])) + list(data.get("attacks", []))
    rows = [r for r in rows if isinstance(r.get("rate"), (int, float)) and not math.isnan(r["rate"])]
    if not rows:
        raise FigureSkipped("audit.json holds no scored attack")
    limit = data["settings"]["max_attack_rate"]
    floor = data["settings"]["min_reference_rate"]
    fig, ax = new_figure(width=8.0, height=1.2 + 0.28 * len(rows))
    ys = list(range(len(rows)))[::-1]  # the first row on top
    colors = []
    for r in rows:
        if r["group"] == "reference":
            colors.append(FAIL_COLOR if r["name"] == "reference" and r["rate"] < floor else REFERENCE_COLOR)
        else:
            colors.append(FAIL_COLOR if r["rate"] > limit else PASS_COLOR)
    rates = [r["rate"] for r in rows]
    errors = [[r["rate"] - r["ci95_low"] for r in rows], [r["ci95_high"] - r["rate"] for r in rows]]
    ax.barh(ys, rates, color=colors, xerr=errors, capsize=2, error_kw={"elinewidth": 0.8})
    # names are the user's text: "latex $\boxed{N}$" is no mathtext to parse (matplotlib raised as it saved)
    ax.set_yticks(ys, [r["name"] for r in rows], fontsize=8, parse_math=False)
    ax.axvline(limit, color=FAIL_COLOR, linestyle="--", linewidth=1, label=f"max attack rate {limit:g}")
    ax.axvline(floor, color=REFERENCE_COLOR, linestyle=":", linewidth=1, label=f"min reference rate {floor:g}")
    ax.set_xlim(0, 1.02)
    ax.set_xlabel(f"rewarded (score >= {data['threshold']:g}), 95% Wilson interval")
    verdict = audit_verdict(data).split(" (")[0]
    model = f" {data['model']}" if data.get("model") else ""
    ax.set_title(
        f"{verdict}: {data.get('profile', '')} ({data.get('reward')}{model}), {data.get('prompts')} prompts",
        parse_math=False,
    )
    ax.legend(loc="lower right", fontsize=8)
    return fig


def audit_verdict(audit: dict) -> str:
    """PASS, FAIL (the attacks over the limit, references under theirs) or INCONCLUSIVE (the attacks nothing was
    counted for), from an audit's summary.json; one written before the verdict was recorded reads from `passed`."""
    verdict = audit.get("verdict") or ("pass" if audit.get("passed") else "fail")
    if verdict == "pass":
        return "PASS"
    if verdict == "inconclusive":
        return "INCONCLUSIVE (" + ", ".join(audit.get("inconclusive", [])) + ")"
    return "FAIL (" + ", ".join(audit.get("failed_attacks", []) + audit.get("references_below", [])) + ")"
