"""The sections of the report: inputs, training runs, benchmarks, parity checks, reward audits.

Each function adds its tables and figures to the Document (figures through a FigureWriter, which
turns a figure that cannot be drawn into a note).
"""

from __future__ import annotations

import fnmatch
import functools

from rlrm.engine.metrics.audit import AGREEMENT, AuditSettings, audit_run, run_series
from rlrm.engine.run_contract import contract_summary
from rlrm.report import attack_audit, benchmark, curves, parity, sweep
from rlrm.report.document import Document
from rlrm.report.figures import FigureSkipped
from rlrm.report.folders import BenchData, ParityData, RewardAuditData, RunData
from rlrm.report.series import available_metrics, check_x_axis, has_metric, match_metrics, shared, split_globs
from rlrm.report.timeline import timeline_figure, timeline_panel


def inputs_section(doc: Document, folders: list) -> None:
    kinds = {RunData: "run", BenchData: "benchmark", ParityData: "parity", RewardAuditData: "reward audit"}
    rows = [[folder.name, kinds[type(folder)], str(folder.path)] for folder in folders]
    doc.section("Inputs").table(["name", "kind", "path"], rows)


def runs_section(doc: Document, all_runs: list[RunData], options, steps, writer) -> None:
    """Run table, training curves (shared metrics only) and the timeline."""
    section = doc.section("Training runs")
    section.table(*_run_table(all_runs))
    usable = [run for run in all_runs if not run.metrics.empty]
    for run in all_runs:
        if run.metrics.empty:
            doc.notes.append(f"{run.name}: left out of the curves (no complete rows)")
    if not usable:
        return
    check_x_axis(usable, options.x)
    for name, key, title in _curve_keys(doc, usable, options.metrics):
        writer.emit(
            section, name, functools.partial(curves.curve_figure, usable, key, options.x, options.smooth, title)
        )
    _timeline(section, usable, steps, writer, "timeline")


def audit_section(doc: Document, all_runs: list[RunData], writer, settings: AuditSettings = AuditSettings()) -> None:
    """The reward-hacking audit of each run (rlrm/engine/metrics/audit.py): a table of checks, the rule-agreement curve."""
    usable = [run for run in all_runs if not run.metrics.empty]
    if not usable:
        return
    section = doc.section("Reward-hacking audit")
    section.text(
        f"Least-squares trends over windows of {settings.window} steps. Divergence: the training reward rises "
        f"(slope t >= {settings.t_min:g}) while val/accuracy, reward/rule_agreement or a reward component's "
        f"reward/component/<name>/rule_agreement falls by >= {settings.min_drop:g} "
        f"(t <= -{settings.t_min:g}). Length drift: response_length/mean moves by >= {settings.length_drift:.0%} "
        f"(|t| >= {settings.t_min:g}). Concentration: the median reward/top1pct_share (top 1% of samples) exceeds {settings.concentration:g}."
    )
    rows = []
    flagged: dict = {}
    for run in usable:
        for finding in audit_run(run_series(run.metrics), settings):
            rows.append([run.name, finding.check, finding.status, finding.detail])
            if finding.flagged:
                flagged.setdefault(run.name, []).append(finding.check)
    section.table(["run", "check", "result", "evidence"], rows)
    if flagged:
        section.text("Flagged: " + "; ".join(f"{name} ({', '.join(checks)})" for name, checks in flagged.items()))
    else:
        section.text("No run flagged.")
    having = [run for run in usable if has_metric(run.metrics, AGREEMENT)]
    if having:
        writer.emit(
            section,
            "curve_rule_agreement",
            functools.partial(
                curves.curve_figure,
                having,
                AGREEMENT,
                "step",
                0.0,
                f"Agreement of the reward with the rule: {AGREEMENT}",
            ),
        )


def _curve_keys(doc: Document, usable: list[RunData], globs: list[str]) -> list[tuple[str, str, str]]:
    """(figure name, metric, title) of each curve to draw; left-out metrics become notes."""
    chosen = []
    if globs:
        keys = match_metrics(split_globs(globs), available_metrics(usable))
        kept, left_out = shared(usable, keys)
        chosen = [(curves.file_name(key), key, key) for key in kept]
    else:
        left_out = {}
        for spec in curves.DEFAULT_CURVES:
            kept, missing = shared(usable, list(spec.keys))
            if kept:
                chosen.append((f"curve_{spec.name}", kept[0], f"{spec.title}: {kept[0]}"))
                continue
            partial = {k: v for k, v in missing.items() if len(v) < len(usable)}
            if partial:
                left_out.update(partial)
            else:
                doc.notes.append(f"figure curve_{spec.name} skipped: no run has {' or '.join(spec.keys)}")
        # one curve per reward component (rlrm/engine/rewards/components.py), when runs log them
        names = [k for k in available_metrics(usable) if fnmatch.fnmatchcase(k, curves.COMPONENT_CURVES)]
        kept, missing = shared(usable, names)
        left_out.update(missing)
        for key in kept:
            chosen.append((curves.file_name(key), key, f"Reward component (mean, min-max band): {key}"))
    for key, lacking in left_out.items():
        doc.notes.append(f"left out {key}: not in every run (missing in {', '.join(lacking)})")
    return chosen


def _run_table(all_runs: list[RunData]) -> tuple[list[str], list[list]]:
    headers = [
        "run",
        "mode",
        "last step",
        "rows",
        "skipped lines",
        "final reward",
        "best val acc",
        "last val acc",
        "mean tokens/s",
        "wall s",
        "idle trainer",
        "idle rollout",
        "idle reward wait",
        "reward contract",
    ]
    rows = []
    for run in all_runs:
        m = run.metrics
        rows.append(
            [
                run.name,
                run.mode or "n/a",
                run.last_step,
                len(m),
                run.skipped_rows,
                _last(m, "critic/score/mean"),
                _agg(m, "val/accuracy", "max"),
                _last(m, "val/accuracy"),
                _agg(m, "perf/throughput", "mean"),
                _last(m, "perf/wall_s"),
                _agg(m, "idle/trainer", "mean"),
                _agg(m, "idle/rollout", "mean"),
                _agg(m, "idle/reward_wait", "mean"),
                contract_summary(run.path) or "n/a",
            ]
        )
    return headers, rows


def bench_section(doc: Document, data: BenchData, prefix: str, steps, writer) -> None:
    """Per-mode table and figures of one benchmark folder."""
    section = doc.section(f"Benchmark {data.name}")
    facts = [
        f"{k} {data.summary[k]}"
        for k in ("profile", "latency", "latency_scale", "mean_latency_s", "steps", "repeats", "seed")
        if k in data.summary
    ]
    if data.summary.get("simulated"):
        facts.insert(0, "simulated by rlrm bench simulate")
    if facts:
        section.text("; ".join(facts))
    try:
        table = benchmark.mode_table(data)
    except FigureSkipped as skip:
        doc.notes.append(f"{data.name}: no per-mode table ({skip})")
        return
    cols = [c for c in benchmark.TABLE_COLUMNS if c in table.columns]
    old = benchmark.missing_columns(data)
    if old and not data.summary.get("simulated"):
        doc.notes.append(
            f"{data.name}: written by an older rlrm without {', '.join(old)}: no interval or limit for it; "
            "rerun `rlrm bench reward-latency` for them"
        )
    section.text(
        "Per mode: the median over repeats; figures draw its interval (bootstrap 95% from 5 repeats, min-max "
        "below); of_limit = the mode's lower bound on step time / its mean step time after the first."
    )
    section.table(
        ["mode", "runs", *cols], [[label, row["runs"], *(row[c] for c in cols)] for label, row in table.iterrows()]
    )
    _, base = benchmark.split_baseline(data.results)
    if not base.empty:
        section.text("Zero-latency baseline (sync, latency none), mean over its repeats:")
        section.table(cols, [[benchmark.baseline_value(data, c) for c in cols]])
    # a sweep's bars would be one per mode and value: its figures are lines against the swept value instead
    bars = sweep if benchmark.is_sweep(data.results) else benchmark
    if bars is sweep:
        writer.emit(section, f"{prefix}_sweep", lambda: sweep.sweep_figure(data))
    writer.emit(section, f"{prefix}_throughput", lambda: bars.throughput_figure(data))
    writer.emit(section, f"{prefix}_idle", lambda: bars.idle_figure(data))
    writer.emit(section, f"{prefix}_hiding", lambda: bars.hiding_figure(data))
    try:
        phases = benchmark.step_time_table(data)
        if any(c in benchmark.SUB_PHASES for c in phases.columns):
            section.text(
                "Step time, mean seconds per trained step; a column marked (part of a phase) is timed inside that "
                "phase: its seconds are in the phase's already, not added to the step."
            )
        headers = ["mode", *(benchmark.phase_label(c) for c in phases.columns)]
        section.table(headers, [[label, *row] for label, row in phases.iterrows()])
    except FigureSkipped:
        pass
    writer.emit(section, f"{prefix}_step_time", lambda: benchmark.step_time_figure(data))
    latencies = benchmark.injected_latencies(data, doc.notes)
    if latencies:
        rows = _latency_rows(benchmark.distinct_latencies(latencies))
        section.table(["mode", "samples", "mean s", "p50 s", "p90 s", "p99 s", "max s"], rows, digits=3)
    writer.emit(section, f"{prefix}_latency", lambda: benchmark.latency_figure(latencies))
    _timeline(section, _first_repeats(data), steps, writer, f"{prefix}_timeline")


def _first_repeats(data: BenchData) -> list[RunData]:
    """One run per mode (its first repeat) for the timeline, in mode order."""
    rows, _ = benchmark.split_baseline(data.results)
    if "run_dir" not in rows.columns:
        return []
    if benchmark.is_sweep(rows):  # one panel per mode, at the sweep's first point
        rows = rows[rows["sweep_value"].astype(str) == str(rows["sweep_value"].iloc[0])]
    picked = {}
    for label, run_dir in zip(benchmark.categories(rows), rows["run_dir"].astype(str)):
        if label not in picked and run_dir in data.runs:
            picked[label] = data.runs[run_dir]
    return [picked[label] for label in benchmark.ordered(picked)]


def _latency_rows(latencies: dict) -> list[list]:
    import numpy as np

    rows = []
    for label, values in latencies.items():
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        rows.append([label, len(values), float(values.mean()), p50, p90, p99, float(values.max())])
    return rows


def parity_section(doc: Document, data: ParityData, prefix: str, writer) -> None:
    """Statistics, rank flips and figures of one parity folder."""
    section = doc.section(f"Parity {data.name}")
    stats = [list(row) for row in parity.summary_stats(data.summary)]
    if stats:
        section.table(["statistic", "value"], stats, digits=6)
    if data.scores is not None:
        section.text(f"{len(data.scores)} samples")
    writer.emit(section, f"{prefix}_scatter", lambda: parity.scatter_figure(data.scores))
    writer.emit(section, f"{prefix}_residuals", lambda: parity.residual_figure(data.scores))
    try:
        flips = parity.group_flips(data.scores)
    except FigureSkipped as skip:
        doc.notes.append(f"figure {prefix}_rank_flips skipped: {skip}")
    else:
        counts = parity.flip_counts(flips)
        section.text(
            f"Rank flips (strict: any discordant pair): {int(flips['flips'].sum())} of "
            f"{int(flips['pairs'].sum())} pairs in {len(flips)} groups; "
            f"top-1 agreement {flips['top1_agree'].mean():.1%}"
        )
        section.table(["flips in group", "groups"], [[k, v] for k, v in counts.items()])
        writer.emit(
            section, f"{prefix}_rank_flips", lambda: parity.rank_flip_figure(flips, data.summary.get("verdict"))
        )
    if data.train:
        writer.emit(section, f"{prefix}_train", lambda: parity.train_figure(data.train))
    else:
        doc.notes.append(f"{data.name}: no train/legacy and train/loop run folders; training-curve parity skipped")


def reward_audit_section(doc: Document, data: RewardAuditData, prefix: str, writer) -> None:
    """The audit's table (rewarded rate per reference and attack), its verdict and its figure."""
    audit = data.audit
    section = doc.section(f"Reward audit {data.name}")
    verdict = attack_audit.audit_verdict(audit)
    section.text(
        f"{audit.get('reward')} {audit.get('model') or ''} on {audit.get('prompts')} held-out prompts; rewarded: "
        f"score >= {audit.get('threshold')} ({audit.get('threshold_rule')}); {verdict}"
    )
    rows = [
        [
            r["name"],
            r["group"],
            f"{r['rewarded']}/{r['scored'] + r.get('defaulted', 0)}",
            r["rate"],
            r["ci95_low"],
            r["ci95_high"],
            r["mean_score"],
        ]
        for r in list(audit.get("references", [])) + list(audit["attacks"])
    ]
    section.table(["response", "group", "rewarded", "rate", "95% low", "95% high", "mean score"], rows, digits=3)
    writer.emit(section, prefix, lambda: attack_audit.audit_figure(audit))


def _timeline(section, run_list: list[RunData], steps, writer, name: str) -> None:
    notes = writer.notes
    panels = [p for p in (timeline_panel(run, steps, notes) for run in run_list) if p is not None]
    if not panels:
        notes.append(f"figure {name} skipped: no run has a trace.json")
        return
    writer.emit(section, name, lambda: timeline_figure(panels))


def _last(metrics, key: str):
    if not has_metric(metrics, key):
        return None
    return float(metrics[key].dropna().iloc[-1])


def _agg(metrics, key: str, how: str):
    if not has_metric(metrics, key):
        return None
    return float(getattr(metrics[key].dropna(), how)())
