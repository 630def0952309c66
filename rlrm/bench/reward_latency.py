"""`rlrm bench reward-latency`: how much injected reward latency each scheduling mode hides.

    bench = RewardLatencyBench(profile="tiny-rule", modes=MODES, latency="uniform:1:40", steps=10,
                               repeats=1, seed=0, out=Path("bench/rl"))
    bench.run(on_run=print)   # writes results.csv/.parquet, summary.json and runs/<name>/

Each repeat runs a zero-latency `sync` baseline, then every mode under the same latency, in an order
rotated by one every repeat, so the drift of a shared machine lands on every mode alike; each run is
compared with sync's and the baseline's runs of its own repeat (rlrm/bench/results.py). Each repeat's
baseline step time sets that repeat's latency scale (unless one is given) so that the mean injected latency
is `latency_fraction` (default 0.5) of a zero-latency step, as in verl's reference setup (uniform 1-40 s
against steps of about a minute): a scale fixed by the first baseline alone carried that one run's noise into
every repeat (five 7-repeat invocations drew mean latencies 0.29-0.43 s, and their fully-async speedups
followed them, 1.79x-2.20x); per repeat, it is one draw of the repeat's pair, which the median evens out. Per mode the summary holds the median over repeats with its interval
(rlrm/stats.py) and the mode's lower bound on step time from the baselines' phase times
(rlrm/bench/limits.py). Runs that finished are kept when the benchmark is interrupted; the ones missing
are listed.

With `tool_latency` (e.g. "fixed:0.5", the same grammar, in seconds, never rescaled) every run is a multi-turn
tool rollout (`rollout.agent.enabled=true` on the profile) and the latent runs also sleep that latency before
every tool call (`rollout.agent.inject`): the table shows how each mode hides a slow judge and slow tools at
once. The baseline runs the same tool rollouts without either latency; the bounds ignore the tool latency (they
stay lower bounds, looser ones).
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlrm.bench.limits import Phases, Shape, baseline_phases, batch_latency, mode_bound, of_limit
from rlrm.bench.results import COLUMNS, compare, mode_stats, run_row
from rlrm.bench.simulate.spec import MAX_AHEAD_FIXED, named_twice
from rlrm.config.latency import parse_latency
from rlrm.config.loader import load_profile
from rlrm.config.schema import MODES
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.run_checks import check_inputs
from rlrm.engine.trainer import start_run, train
from rlrm.errors import ConfigError, RlrmError, RunFolderError, TrainingError, write_whole
from rlrm.json_values import json_safe

BASELINE = "sync-nolatency"
MAX_REPEATS = 100  # each repeat is len(modes) + 1 training runs: a typo of 1000000 must not start millions
SPREAD_NOTE = "median over repeats; interval: bootstrap 95% of the median from 5 repeats, min-max below"


@dataclass
class RunPlan:
    name: str  # folder under runs/
    mode: str
    repeat: int
    latency: str  # "none" for the baseline


@dataclass
class RewardLatencyBench:
    profile: str
    modes: list[str]
    latency: str
    steps: int
    repeats: int
    seed: int
    out: Path
    latency_scale: float | None = None  # None: chosen per repeat from its baseline's step time
    latency_fraction: float = 0.5
    overrides: list[str] = field(default_factory=list)
    tool_latency: str | None = None  # rollout.agent.inject.latency of the latent runs; None: no tool rollouts
    console: str = "none"
    out_made_for_it: bool = False  # `out` is the empty default folder the CLI made: removed like one made here
    rows: list[dict] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    scales: dict[int, float] = field(default_factory=dict)  # repeat -> the latency scale its latent runs used

    def __post_init__(self):
        unknown = [m for m in self.modes if m not in MODES]
        if unknown or not self.modes:
            raise ConfigError(f"unknown mode(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(MODES)}")
        twice = named_twice(self.modes)
        if twice:
            raise ConfigError(f"--modes {twice}")
        if self.steps < 1 or self.repeats < 1:
            raise ConfigError("--steps and --repeats must be at least 1")
        if self.repeats > MAX_REPEATS:
            runs = self.repeats * (len(self.modes) + 1)
            raise ConfigError(
                f"--repeats {self.repeats} would start {runs} training runs; at most {MAX_REPEATS} repeats "
                "(5 give a bootstrap 95% interval)"
            )
        try:
            self.dist = parse_latency(self.latency)
        except ValueError as exc:
            raise ConfigError(f"--latency: {exc}") from None
        if self.dist.is_zero:
            raise ConfigError("--latency is zero: the benchmark compares modes under a latency; give e.g. uniform:1:40")
        if self.tool_latency is not None:
            try:
                self.tool_dist = parse_latency(self.tool_latency)
            except ValueError as exc:
                raise ConfigError(f"--tool-latency: {exc}") from None
            self._check_agent_not_turned_off()
        if self.latency_scale is None:
            self._mean_latency()  # the automatic scale needs a finite mean: refuse now, not after the baseline
        self.out = Path(self.out)
        if self.out.exists() and not self.out.is_dir():
            raise RunFolderError(f"--out {self.out} is a file; give a folder")
        if self.out.exists() and any(self.out.iterdir()):
            raise RunFolderError(f"{self.out} is not empty; choose another --out or remove it")
        self._bounds_key: tuple | None = None  # the baselines and scale `_bounds` was computed for
        self._bounds: dict[str, float] = {}
        # Every run's profile, latency included: a bad --set, profile or mode combination fails before anything runs.
        # (It also sets `reward_max_concurrency` and `_shape`, which the summary reads.)
        self._profile_for("sync", 0, None)
        for mode in self.modes:
            self._profile_for(mode, 0, self.latency_scale if self.latency_scale is not None else 1.0)

    def plan(self) -> list[RunPlan]:
        """Per repeat: the zero-latency baseline, then the modes, their order rotated by the repeat."""
        runs = []
        for r in range(self.repeats):
            turn = r % len(self.modes)
            runs.append(RunPlan(f"{BASELINE}-r{r}", "sync", r, "none"))
            runs += [RunPlan(f"{m}-r{r}", m, r, self.latency) for m in self.modes[turn:] + self.modes[:turn]]
        return runs

    def run(self, on_run=None) -> dict:
        """Run every planned run; returns the summary (also written to summary.json)."""

        plan = self.plan()
        check_inputs(self._profile_for("sync", 0, None))
        created = not self.out.exists() or self.out_made_for_it
        self.out.mkdir(parents=True, exist_ok=True)
        try:
            for i, item in enumerate(plan):
                scale = self._scale_of(item.repeat) if item.latency != "none" else None
                profile = self._profile_for(item.mode, item.repeat, scale)
                run_dir = start_run(profile, self.out / "runs" / item.name)
                try:
                    result = train(run_dir, console=self.console)
                    if result.interrupted:
                        raise KeyboardInterrupt
                    if result.stopped:  # the guard or the canaries (=stop): a run of fewer steps, no bench row
                        raise TrainingError(f"run {item.name} stopped before --steps: {result.stopped}")
                except (RlrmError, KeyboardInterrupt):
                    shutil.rmtree(run_dir, ignore_errors=True)  # results and runs/ hold finished runs only
                    raise
                row = {
                    "mode": item.mode,
                    "repeat": item.repeat,
                    "latency": item.latency,
                    "latency_scale": scale if scale is not None else math.nan,
                    "tool_latency": self.tool_latency if self.tool_latency and item.latency != "none" else "none",
                    "run_dir": f"runs/{item.name}",
                    **run_row(read_metrics(run_dir / "metrics.jsonl")),
                }
                self.rows.append(row)
                self._write()
                if on_run:
                    on_run(i + 1, len(plan), item, row)
        except KeyboardInterrupt:
            done = {r["run_dir"] for r in self.rows}
            self.missing = [p.name for p in plan if f"runs/{p.name}" not in done]
            self._write()
            raise
        except RlrmError:
            if not self.rows and created:
                shutil.rmtree(self.out, ignore_errors=True)  # nothing finished: leave nothing behind
            elif self.rows:
                done = {r["run_dir"] for r in self.rows}
                self.missing = [p.name for p in plan if f"runs/{p.name}" not in done]
                self._write()
            raise
        return self._write()

    def _scale_of(self, repeat: int) -> float:
        """The given scale, or the one that makes the mean injected latency latency_fraction of `repeat`'s
        zero-latency sync step (its baseline runs first in the repeat)."""
        if self.latency_scale is not None:
            return self.latency_scale
        if repeat not in self.scales:
            base = [r for r in self.rows if r["latency"] == "none" and r["repeat"] == repeat]
            step_s = base[-1]["step_time_p50"]
            mean = self._mean_latency()
            self.scales[repeat] = self.latency_fraction * step_s / mean if mean > 0 else 1.0
        return self.scales[repeat]

    def _scale(self) -> float | None:
        """The benchmark's one scale: the given one, or the median of the repeats' (None before the first)."""
        if self.latency_scale is not None or not self.scales:
            return self.latency_scale
        from rlrm.stats import quantile

        return quantile(sorted(self.scales.values()), 0.5)

    def _check_agent_not_turned_off(self) -> None:
        """--tool-latency turns rollout.agent on for every run: a --set that turns it off is a contradiction, not
        something to override in silence."""
        named = any(o.partition("=")[0].strip() == "rollout.agent.enabled" for o in self.overrides)
        if named and not load_profile(self.profile, self.overrides).rollout.agent.enabled:
            raise ConfigError(
                "--tool-latency needs tool rollouts, and --set rollout.agent.enabled=false turns them off; "
                "drop one of the two"
            )

    def _mean_latency(self) -> float:
        try:
            mean = self.dist.mean()
        except ValueError as exc:
            raise ConfigError(f"--latency {self.latency}: {exc}; pass --latency-scale explicitly") from None
        if not math.isfinite(mean):
            raise ConfigError(f"--latency {self.latency}: its mean is not finite; pass --latency-scale explicitly")
        return mean

    def _profile_for(self, mode: str, repeat: int, scale: float | None):
        sets = [
            *self.overrides,
            f"trainer.mode={mode}",
            f"trainer.total_steps={self.steps}",
            f"trainer.seed={self.seed}",
            f"trainer.val_every={self.steps}",  # once, at the end: validation never sits inside the timed steps
            "trainer.val_before_train=false",
            "trainer.save_every=0",
            f"reward.inject.seed={self.seed * 1000 + repeat}",
        ]
        if scale is not None:
            sets += [f"reward.inject.latency={self.latency}", f"reward.inject.scale={scale!r}"]
        else:
            sets += ["reward.inject.latency=none"]
        if self.tool_latency is not None:
            # the baseline runs the same tool rollouts with instant tools: only the latencies differ
            tools = self.tool_latency if scale is not None else "none"
            sets += [
                "rollout.agent.enabled=true",
                f"rollout.agent.inject.latency={tools}",
                f"rollout.agent.inject.seed={self.seed * 1000 + repeat}",
            ]
        profile = load_profile(self.profile, sets)
        if not any(o.startswith("reward.max_concurrency=") for o in self.overrides):
            # An injected latency stands for a remote service whose latency does not grow with load:
            # the loop's own concurrency cap must not turn it into a queue. Room for every sample
            # that can be in flight at once (max_staleness + 2 batches; --set overrides it).
            in_flight = profile.data.train_batch_size * profile.rollout.n * (profile.trainer.max_staleness + 2)
            needed = math.ceil(in_flight / profile.reward.num_workers)
            profile.reward.max_concurrency = max(profile.reward.max_concurrency, needed)
        self.reward_max_concurrency = profile.reward.max_concurrency
        self._shape = {
            "samples": profile.data.train_batch_size * profile.rollout.n,
            "max_staleness": profile.trainer.max_staleness,
            "minibatches": max(1, profile.data.train_batch_size // profile.actor.mini_batch_size),
            "epochs": profile.actor.ppo_epochs,
        }
        return profile

    def summary(self) -> dict:
        rows = self._rows_with_limits()
        phases = self._phases()
        base = [r for r in rows if r["latency"] == "none"]
        scale = self._scale()
        mean_latency = _mean_of(self.dist.scaled(scale)) if scale is not None else None
        modes = mode_stats(rows, self.latency)
        for mode, stats in modes.items():
            stats["bound_step_s"] = self._bound(mode)
            stats["of_limit"] = of_limit(stats["bound_step_s"], stats.get("step_time_mean", math.nan))
        return {
            "profile": self.profile,
            "latency": self.latency,
            "latency_scale": scale,  # the median of latency_scales when chosen per repeat
            "latency_scales": [self.scales[r] for r in sorted(self.scales)] if self.latency_scale is None else [],
            "mean_latency_s": mean_latency,
            "tool_latency": self.tool_latency,
            "mean_tool_latency_s": self._mean_tool_latency(),
            "reward_max_concurrency": self.reward_max_concurrency,
            "latency_to_step_ratio": self._latency_to_step_ratio(base),
            "steps": self.steps,
            "max_staleness": self._shape["max_staleness"],
            "repeats": self.repeats,
            "seed": self.seed,
            "spread": SPREAD_NOTE if self.repeats > 1 else "unknown: one repeat; run --repeats 5 for an interval",
            "phases": asdict(phases) if phases else None,
            "baseline": mode_stats(rows, "none").get("sync", {}),
            "modes": modes,
            "missing": self.missing,
        }

    def repeat_latency(self, repeat: int) -> tuple[float, float | None] | None:
        """`repeat`'s mean injected latency in seconds (NaN when infinite) and its ratio to the repeat's zero-latency
        sync step (None for the ratio without a baseline step; None in all before the repeat has a scale)."""
        scale = self.latency_scale if self.latency_scale is not None else self.scales.get(repeat)
        if scale is None:
            return None
        mean = _mean_of(self.dist.scaled(scale))
        base = [r for r in self.rows if r["latency"] == "none" and r["repeat"] == repeat]
        step_s = base[-1]["step_time_p50"] if base else 0.0
        return mean, (mean / step_s if step_s > 0 else None)

    def _latency_to_step_ratio(self, base: list[dict]) -> float | None:
        """Mean injected latency over the zero-latency step: per repeat with a latent run, the median."""
        from rlrm.stats import quantile

        latencies = [self.repeat_latency(repeat) for repeat in sorted({r["repeat"] for r in base})]
        ratios = [ratio for _, ratio in filter(None, latencies) if ratio is not None]
        return quantile(sorted(ratios), 0.5) if ratios else None

    def _mean_tool_latency(self) -> float | None:
        """The mean injected latency of one tool call in seconds (None without tool latency, NaN when infinite)."""
        if self.tool_latency is None:
            return None
        return _mean_of(self.tool_dist)

    def _phases(self) -> Phases | None:
        """The zero-latency sync runs' phase times (None before the first baseline finished)."""
        runs = [read_metrics(self.out / r["run_dir"] / "metrics.jsonl") for r in self.rows if r["latency"] == "none"]
        try:
            return baseline_phases(runs) if runs else None
        except ValueError:
            return None

    def _bound(self, mode: str) -> float:
        """`mode`'s lower bound on step time from the baselines so far (NaN before the first)."""
        scale = self._scale()
        key = (sum(r["latency"] == "none" for r in self.rows), scale)
        if self._bounds_key != key:
            self._bounds_key, self._bounds = key, {}
            phases = self._phases()
            if phases is not None and scale is not None:
                shape = self._shape
                latency = batch_latency(self.dist.scaled(scale), shape["samples"], seed=self.seed)
                limits = Shape(shape["max_staleness"], shape["minibatches"], shape["epochs"])
                self._bounds = {m: mode_bound(m, phases, latency, limits) for m in MODES}
        return self._bounds.get(mode, math.nan)

    def _rows_with_limits(self) -> list[dict]:
        """The results rows with each run's bound and of-limit, and its mode's median speedup and interval."""
        rows = compare(self.rows) if self.rows else []
        bounds = {m: self._bound(m) for m in {r["mode"] for r in rows}}
        stats = mode_stats(rows, self.latency)
        for r in rows:
            latent = r["latency"] != "none"
            r["bound_step_s"] = bounds[r["mode"]] if latent else math.nan
            r["of_limit"] = of_limit(r["bound_step_s"], r["step_time_mean"])
            mode = stats.get(r["mode"], {}) if latent else {}
            r["speedup_median"] = mode.get("speedup_vs_sync", math.nan)
            r["speedup_lo"] = mode.get("speedup_vs_sync_lo", math.nan)
            r["speedup_hi"] = mode.get("speedup_vs_sync_hi", math.nan)
            r["interval"] = mode.get("interval", "")
        return rows

    def _write(self) -> dict:
        """results.csv, results.parquet and summary.json, each written whole (tmp + rename)."""
        import pandas as pd

        frame = pd.DataFrame(self._rows_with_limits(), columns=COLUMNS)
        write_whole(self.out / "results.csv", lambda p: frame.to_csv(p, index=False))
        write_whole(self.out / "results.parquet", lambda p: frame.to_parquet(p, index=False))
        summary = self.summary()
        write_whole(self.out / "summary.json", lambda p: p.write_text(json.dumps(json_safe(summary), indent=2)))
        return summary


def _mean_of(dist) -> float:
    """`dist`'s mean in seconds, NaN where it is infinite (pareto with ALPHA <= 1, run with an explicit scale)."""
    try:
        return dist.mean()
    except ValueError:
        return math.nan


def short_run_warning(summary: dict) -> str | None:
    """A warning when the runs were too short for a mode to reach its steady state (None: they were not).

    A mode that runs ahead (one-step-off by 1 batch, fully-async by trainer.max_staleness) generates its
    first max_ahead + 1 batches during step 1, and its next steps train on them without waiting: the mean
    step time after the first, which speedups and of_limit use, then beats the steady state. The runs are
    too short when steps <= max_ahead + 2 for such a mode, or when any mode is faster than its own lower
    bound (of_limit above 1).
    """
    steps, modes = summary["steps"], summary["modes"]
    ahead = {mode: MAX_AHEAD_FIXED.get(mode, summary["max_staleness"]) for mode in modes}
    short = [mode for mode in modes if 0 < ahead[mode] and steps <= ahead[mode] + 2]
    over = [mode for mode, stats in modes.items() if _above_one(stats.get("of_limit"))]
    if not short and not over:
        return None
    why = [
        f"{mode} generates {ahead[mode] + 1} batches in step 1, so its next {ahead[mode]} step(s) wait for no "
        "generation"
        for mode in short
    ]
    if over:
        limits = ", ".join(f"{mode} {modes[mode]['of_limit']:.2f}" for mode in over)
        why.append(f"of limit above 1 (faster than its own lower bound): {limits}")
    enough = max(10, 5 * (max(ahead[mode] for mode in short + over) + 2))
    return (
        f"--steps {steps} is too short for a steady state: {'; '.join(why)}; the speedups and hiding efficiencies "
        f"above are inflated: raise --steps (e.g. --steps {enough})"
    )


def _above_one(value) -> bool:
    return isinstance(value, (int, float)) and value > 1  # NaN and None (unknown) are not
