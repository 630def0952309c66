"""`rlrm bench`: benchmarks that answer a question with numbers (today: reward latency)."""

from __future__ import annotations

import math
import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from rlrm.cli.common import friendly_errors, out_or_fresh
from rlrm.cli.options import ProfileOption, SeedOption, SetOption, StepsOption, given
from rlrm.config.schema import MODES
from rlrm.errors import ConfigError

app = typer.Typer(help="Benchmarks: how scheduling modes hide reward latency.", no_args_is_help=True)


@app.command("reward-latency", short_help="Measure what each scheduling mode hides under injected reward latency.")
@friendly_errors
def reward_latency(
    profile: ProfileOption = "tiny-rule",
    modes: Annotated[str, typer.Option(help="Comma-separated scheduling modes to compare.")] = ",".join(MODES),
    latency: Annotated[str, typer.Option(help="Injected reward latency per sample (see reward.inject.latency).")] = (
        "uniform:1:40"
    ),
    tool_latency: Annotated[
        Optional[str],
        typer.Option(
            help="Also inject this latency before every tool call (rollout.agent.inject.latency, seconds, not "
            "rescaled); turns rollout.agent on for every run (refused with --set rollout.agent.enabled=false).",
        ),
    ] = None,
    latency_scale: Annotated[
        Optional[float],
        typer.Option(
            help="Multiply the latency by this (default: per repeat, mean latency = half of that repeat's "
            "zero-latency sync step).",
            min=0,
        ),
    ] = None,
    steps: StepsOption = 10,
    repeats: Annotated[
        int,
        typer.Option(
            help="Repeats: each a zero-latency baseline and every mode, in a rotated order (5: a bootstrap 95% "
            "interval; 2-4: min-max; 1: no spread; at most 100).",
            min=1,
        ),
    ] = 5,
    seed: SeedOption = 0,
    out: Annotated[
        Optional[Path],
        typer.Option("--out", help="Output folder (default: bench/reward-latency-<time>, -2 after it if taken)."),
    ] = None,
    set_: SetOption = [],
) -> None:
    """Run a zero-latency sync baseline, then each mode under the injected latency; print and save the table
    (in --out, default bench/reward-latency-<time>). --steps, --seed and --set apply to every run; the seed
    also seeds the latency draws."""
    from rlrm.allocator import use_one_malloc_arena
    from rlrm.open_files import raise_open_files_limit

    use_one_malloc_arena()  # before any thread starts: see rlrm/allocator.py
    raise_open_files_limit()  # soft := hard, for this process and the servers it launches: see rlrm/open_files.py
    from rlrm.bench.reward_latency import RewardLatencyBench, short_run_warning

    with out_or_fresh(out, Path("bench"), "reward-latency") as folder:  # made now: two benches in one second
        bench = RewardLatencyBench(
            profile=given(profile, "--profile"),
            modes=[m.strip() for m in modes.split(",") if m.strip()],
            latency=latency,
            steps=given(steps, "--steps"),
            repeats=repeats,
            seed=given(seed, "--seed"),
            out=folder,
            latency_scale=latency_scale,
            tool_latency=tool_latency,
            overrides=list(set_),
            console="rich" if sys.stdout.isatty() else "none",
            out_made_for_it=out is None,
        )
        printed_scale = set()  # the repeats whose latency scale was printed

        def on_run(i, total, item, row):
            scale = row.get("latency_scale")
            latent = bench.repeat_latency(item.repeat)
            if scale is not None and scale == scale and latent is not None and item.repeat not in printed_scale:
                mean, ratio = latent
                typer.echo(
                    f"repeat {item.repeat}: latency {latency} x {scale:.4g}: mean {mean:.3f} s per sample = "
                    f"{'?' if ratio is None else f'{ratio:.2f}'} of its zero-latency sync step; "
                    f"reward.max_concurrency {bench.reward_max_concurrency} per worker"
                )
                printed_scale.add(item.repeat)
            typer.echo(
                f"[{i}/{total}] {item.name}: {row['tokens_per_s']:,.0f} tok/s, step p50 {row['step_time_p50']:.2f} s"
            )

        try:
            summary = bench.run(on_run=on_run)
        except KeyboardInterrupt:
            typer.echo(
                f"interrupted: {len(bench.rows)} runs kept in {folder}; missing: {', '.join(bench.missing)}", err=True
            )
            raise typer.Exit(130) from None
        _print_table(summary)
        warning = short_run_warning(summary)
        if warning:
            typer.echo(f"warning: {warning}")
        typer.echo(f"results: {folder}/results.csv, {folder}/summary.json (rlrm report {shlex.quote(str(folder))})")


def _print_table(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    repeats = summary.get("repeats", 1)
    tools = summary.get("tool_latency")
    tools = f", tool latency {tools} (mean {summary['mean_tool_latency_s']:.3f} s/call)" if tools else ""
    table = Table(
        title=f"reward latency {summary['latency']} (mean {summary['mean_latency_s']:.3f} s/sample){tools}, "
        f"medians over {repeats} repeat{'s' if repeats != 1 else ''}"
    )
    for col in (
        "mode",
        "tok/s",
        "speedup vs sync",
        "hiding eff.",
        "of limit",
        "idle trainer",
        "idle rollout",
        "reward wait",
        "stale max",
        "reward",
        "val acc",
    ):
        table.add_column(col, justify="left" if col == "mode" else "right", no_wrap=True)
    base = summary["baseline"]
    rows = [("sync, no latency", base)] + list(summary["modes"].items())
    for name, m in rows:
        noise = " (within noise)" if m.get("within_noise") else ""
        table.add_row(
            name,
            f"{m['tokens_per_s']:,.0f}",
            _with_interval(m, "speedup_vs_sync", "{:.2f}x") + noise,
            _with_interval(m, "hiding_efficiency", "{:.2f}"),
            _fmt(m.get("of_limit"), "{:.2f}"),
            _with_interval(m, "idle_trainer", "{:.2f}"),
            _with_interval(m, "idle_rollout", "{:.2f}"),
            _fmt(m.get("idle_reward_wait"), "{:.2f}"),
            _fmt(m.get("staleness_max"), "{:.0f}"),
            _fmt(m.get("final_reward"), "{:.3f}"),
            _fmt(m.get("val_accuracy"), "{:.3f}"),
        )
    console = Console()
    console.width = max(console.width, 180)  # the table is the point: never squash it into "…"
    console.print(table)
    method = next((m.get("interval") for m in summary["modes"].values() if m.get("interval")), "unknown")
    if method == "unknown":
        console.print("spread unknown: one repeat per mode; --repeats 5 gives a bootstrap 95% interval")
    else:
        what = "bootstrap 95% interval of the median" if method == "bootstrap95" else "min-max over the repeats"
        console.print(
            f"\\[brackets]: {what}; 'within noise': the speedup's interval holds 1.0. "
            "of limit: the mode's lower bound on step time (perfect overlap) / its mean step time after the first "
            "(docs/scheduling.md#injected-latency-and-the-benchmark)"
        )


def _with_interval(m: dict, key: str, pattern: str) -> str:
    value, lo, hi = m.get(key), m.get(f"{key}_lo"), m.get(f"{key}_hi")
    text = _fmt(value, pattern)
    if text == "-" or lo is None or hi is None or any(isinstance(x, float) and math.isnan(x) for x in (lo, hi)):
        return text
    return f"{text} [{_fmt(lo, pattern).rstrip('x')}-{_fmt(hi, pattern)}]"


def _fmt(value, pattern: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return pattern.format(value)


@app.command("simulate")
@friendly_errors
def simulate(
    from_: Annotated[
        Optional[Path],
        typer.Option(
            "--from", help="Calibrate on a run folder, or validate against a reward-latency benchmark folder."
        ),
    ] = None,
    spec: Annotated[
        Optional[Path],
        typer.Option(help="YAML cluster spec (e.g. examples/cluster-gpu.yaml), applied over --from's fit."),
    ] = None,
    set_: Annotated[
        list[str], typer.Option("--set", help="Spec override, e.g. rollout.replicas=64 (repeatable).")
    ] = [],
    sweep: Annotated[
        Optional[list[str]],
        typer.Option(help="KEY=V1,V2,...: one result row per value and mode (one key; fix others with --set)."),
    ] = None,
    modes: Annotated[Optional[str], typer.Option(help="Comma-separated modes (default: the spec's).")] = None,
    steps: Annotated[Optional[int], typer.Option(help="Steps per simulated run.", min=1)] = None,
    repeats: Annotated[int, typer.Option(help="Simulated runs per mode (different draws; at most 100).", min=1)] = 1,
    out: Annotated[
        Optional[Path], typer.Option(help="Output folder (default: sim/simulate-<time>, -2 after it if taken).")
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", metavar="", help="Print the resolved spec (a file --spec reads) and simulate nothing."
        ),
    ] = False,
) -> None:
    """Predict what each scheduling mode buys, from a run's measured phase costs or a cluster spec."""

    from rlrm.bench.simulate.check_vs_bench import check_against_bench
    from rlrm.bench.simulate.plan import make_plan
    from rlrm.bench.simulate.run import run_simulation
    from rlrm.cli import simulate_view as view

    with out_or_fresh(out, Path("sim"), "simulate") as folder:  # made now (-2 if taken); removed if left empty
        from rlrm.bench.simulate.spec import named_twice
        from rlrm.config.schema import MODES

        named = [m.strip() for m in (modes or "").split(",") if m.strip()]
        twice = named_twice(named)
        if twice:  # named as --modes, not as the --set the option becomes
            raise ConfigError(f"--modes {twice}")
        unknown = [m for m in named if m not in MODES]
        if unknown or (modes is not None and not named):
            raise ConfigError(f"--modes {modes!r}: name scheduling modes, comma-separated, from {', '.join(MODES)}")
        extra = [*set_, *([f"modes=[{modes}]"] if modes else []), *([f"workload.steps={steps}"] if steps else [])]
        if sweep and len(sweep) > 1:  # typer keeps the last of a repeated option: the first sweep was dropped
            keys = ", ".join(s.partition("=")[0] for s in sweep)
            raise ConfigError(
                f"--sweep is given {len(sweep)} times ({keys}): one key is swept a run; fix the others with "
                "--set KEY=VALUE"
            )
        plan = make_plan(from_, spec, extra, sweep[0] if sweep else None)
        if plan.bench is not None:
            check = check_against_bench(plan.bench, folder, extra)
            view.print_params(check.calibration)
            view.print_validation(check)
            typer.echo(
                f"simulated in {check.result.seconds:.2f} s: {folder}/validation.csv, {folder}/results.csv (rlrm report {shlex.quote(str(folder))})"
            )
            return
        if plan.spec is None:  # make_plan resolves a spec whenever it is not validating a benchmark folder
            raise RuntimeError("the simulation plan holds no spec outside benchmark validation")
        if dry_run:
            from rlrm.bench.simulate.spec import dump_spec

            typer.echo(dump_spec(plan.spec), nl=False)
            return
        if plan.calibration is not None:
            view.print_params(plan.calibration)
        result = run_simulation(plan.spec, folder, plan.sweep, repeats)
        view.print_results(result)
        typer.echo(
            f"simulated in {result.seconds:.2f} s: {folder}/results.csv, {folder}/summary.json (rlrm report {shlex.quote(str(folder))})"
        )
