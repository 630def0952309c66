"""Tables `rlrm bench simulate` prints: fitted parameters, results per mode, predicted vs measured."""

from __future__ import annotations

import math

import typer


def _console():
    from rich.console import Console

    console = Console()
    console.width = max(console.width, 190)  # the tables are the point: never squash them into "…"
    return console


def _fmt(value, pattern: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return pattern.format(value)


def print_params(calibration) -> None:
    """The fitted parameters and how each was fitted (fit error included)."""
    from rich.table import Table

    table = Table(title=f"fitted on {', '.join(calibration.sources)} ({calibration.steps} steps)")
    for col in ("parameter", "value", "fitted from"):
        table.add_column(col, overflow="fold")
    for key, value, note in calibration.params:
        table.add_row(key, _fmt(value, "{:.4g}") if isinstance(value, float) else str(value), note)
    _console().print(table)


def print_results(result) -> None:
    """One row per (sweep point, mode): throughput, speedup, hiding efficiency, idle ratios, staleness and
    reward failures; a warning line under the table when any reward failed."""
    from rich.table import Table

    sweep = result.summary.get("sweep")
    table = Table(title="simulated" + (f", sweep over {sweep['key']}" if sweep else ""))
    cols = (["point"] if sweep else []) + [
        "mode",
        "latency",
        "tok/s",
        "speedup vs sync",
        "hiding eff.",
        "idle trainer",
        "idle rollout",
        "reward wait",
        "stale max",
        "reward failures",
    ]
    for col in cols:
        table.add_column(col, justify="left" if col in ("point", "mode", "latency") else "right", no_wrap=True)
    for r in result.rows:
        unreal = _unreal(r, result.rows)
        table.add_row(
            *([str(r["sweep_value"])] if sweep else []),
            _name(r),
            _latency(r),
            _fmt(r["tokens_per_s"], "{:,.0f}"),
            unreal or _fmt(r["speedup_vs_sync"], "{:.2f}x"),
            unreal or _fmt(r["hiding_efficiency"], "{:.2f}"),
            _fmt(r["idle_trainer"], "{:.2f}"),
            _fmt(r["idle_rollout"], "{:.2f}"),
            _fmt(r["idle_reward_wait"], "{:.2f}"),
            _fmt(r["staleness_max"], "{:.0f}"),
            _failures(r),
        )
    _console().print(table)
    for line in failure_warnings(result.rows):
        typer.echo(f"warning: {line}")
    for note in result.notes:
        typer.echo(f"note: {note}")


def _name(r: dict) -> str:
    return "sync, no latency" if r["run_dir"].rsplit("/", 1)[-1].startswith("sync-nolatency") else r["mode"]


def _where(r: dict) -> str:
    point = f" at {r['sweep_key']}={r['sweep_value']}" if r.get("sweep_key") else ""
    return f"{_name(r)}{point}"


def _latency(r: dict) -> str:
    """The latency spec as the run drew it: with its scale unless that is 1 (the baseline's is NaN)."""
    scale = r.get("latency_scale")
    if r["latency"] == "none" or scale is None or not math.isfinite(scale) or scale == 1:
        return str(r["latency"])
    return f"{r['latency']} x{scale:g}"


def _scored(r: dict) -> int:
    return r.get("reward_samples", r["samples"])


def _all_failed(r: dict) -> bool:
    return _scored(r) > 0 and r["reward_failures"] >= _scored(r)


def _unreal(r: dict, rows: list[dict]) -> str | None:
    """What to show instead of a speedup that compares failed calls, not scheduling (None: it is real)."""
    if not r["steps"]:
        return "stopped"
    if _all_failed(r):
        return "all failed"
    sync = [
        s
        for s in rows
        if s["mode"] == "sync"
        and s["latency"] == r["latency"]
        and s.get("sweep_value") == r.get("sweep_value")
        and s.get("repeat") == r.get("repeat")
    ]
    if sync and not sync[0]["steps"]:
        return "sync stopped"
    return "sync all failed" if sync and _all_failed(sync[0]) else None


def _failures(r: dict) -> str:
    if not r["steps"]:
        return "-"  # the stopped step's failures are in its note
    if not r["reward_failures"]:
        return "0"
    return f"{r['reward_failures']:,} ({r['reward_failures'] / max(_scored(r), 1):.1%})"


def failure_warnings(rows: list[dict]) -> list[str]:
    """The warning lines for the runs whose rewards failed (none when every reward was scored)."""
    failed = [r for r in rows if r["reward_failures"] > 0]
    if not failed:
        return []
    worst = max(failed, key=lambda r: r["reward_failures"] / max(_scored(r), 1))
    lines = [
        f"rewards failed in {len(failed)} of {len(rows)} runs (largest share: {_where(worst)}, "
        f"{worst['reward_failures']:,} of {_scored(worst):,} samples); their step times include the failed calls' "
        "timeouts and retries, and the failed samples were scored or dropped as reward.on_failure says: raise reward.timeout_s "
        "or lower the latency"
    ]
    dead = [r for r in failed if _all_failed(r)]
    if dead:
        lines.append(
            f"every reward failed in {len(dead)} runs ({', '.join(_where(r) for r in dead[:4])}"
            f"{', ...' if len(dead) > 4 else ''}): their speedups are not shown, they measure nothing"
        )
    return lines


def _interval(r: dict) -> str:
    lo, hi = r.get("measured_lo"), r.get("measured_hi")
    if lo is None or hi is None or lo != lo or hi != hi:  # NaN: one repeat, no interval
        return "-"
    return f"{lo:.2f}-{hi:.2f}x"


def print_validation(check) -> None:
    """Per mode: measured and predicted speedup vs sync and idle/trainer, the errors, and the same
    prediction at each run's measured compute speed (what of the error is the machine's drift)."""
    from rich.table import Table

    table = Table(title=f"predicted vs measured under {check.latency}")
    for col in (
        "mode",
        "speedup",
        "interval",
        "predicted",
        "error",
        "inside",
        "idle trainer",
        "predicted",
        "diff.",
        "fresh draws",
        "error",
        "compute speed",
        "predicted at it",
        "error",
        "idle at it",
    ):
        table.add_column(col, justify="left" if col == "mode" else "right", no_wrap=True)
    for r in check.table:
        table.add_row(
            r["mode"],
            f"{r['measured_speedup']:.2f}x",
            _interval(r),
            f"{r['predicted_speedup']:.2f}x",
            f"{r['speedup_error']:+.1%}",
            {True: "yes", False: "no"}.get(r.get("inside"), "-"),
            f"{r['measured_idle_trainer']:.2f}",
            f"{r['predicted_idle_trainer']:.2f}",
            f"{r['idle_trainer_error']:+.2f}",
            f"{r['drawn_speedup']:.2f}x",
            f"{r['drawn_error']:+.1%}",
            _fmt(r["compute_speed"], "{:.2f}x"),
            _fmt(r["at_speed_speedup"], "{:.2f}x"),
            _fmt(r["at_speed_error"], "{:+.1%}"),
            _fmt(r["at_speed_idle_trainer"], "{:.2f}"),
        )
    _console().print(table)
    on = (
        f"on the reward latencies the benchmark's {check.replayed} repeats drew (read from their traces)"
        if check.replayed
        else "on fresh latency draws (the runs' traces do not record theirs)"
    )
    typer.echo(
        "speedup, idle trainer: measured (medians over the benchmark's repeats; interval: bootstrap 95% from 5 "
        f"repeats, min-max below, '-' for one repeat; inside: the prediction falls in it); predicted {on}, with costs fitted to "
        "the zero-latency sync runs alone. Fresh draws: the same prediction over newly drawn latencies (the "
        "expectation). Compute speed: the runs' training per token (mini-batches no decode batch overlapped) against "
        "the zero-latency run's, medians; away from 1x the machine ran at another speed than the costs were fitted at. "
        "Predicted at it: each mode's (and sync's) compute costs divided by its speed"
    )
    if check.missing:
        typer.echo(
            f"note: the benchmark was written by an older rlrm (results.csv has no {', '.join(check.missing)}): "
            "its speedups are over the mean of sync's runs, not paired by repeat; rerun it for intervals and limits"
        )
