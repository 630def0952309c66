"""Fit the simulator's cost models to a run folder: its trace.json, metrics.jsonl and config.yaml.

    cal = calibrate([Path("runs/tiny-rule")])      # several folders of one setup pool their steps
    cal.spec_values                                 # a raw spec mapping (spec.spec_from_mapping)
    cal.params                                      # (key, value, fit note) for printing

What is measured where (rlrm/engine/metrics/trace.py lanes; step windows from metrics.jsonl):
decode batches (`rollout` lane) against their requests (`generate` spans ending with them) and
the step's token counts; the trainer's phases (`timing_s/*`), each mini-batch (`minibatch`
spans, with their sample counts); the reward calls (`reward` spans, less their injected latency);
and the gaps the phases leave (request submission, results returning, per-step bookkeeping).
Step 1 carries the warm-up: the models are fitted on the later steps and step 1's excess becomes
the spec's warm-up terms. A sync run is the cleanest source: nothing overlaps in it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from rlrm.bench.simulate.fit import CostFit, expected_range_z, fit_clipped_normal, fit_cost
from rlrm.errors import RunFolderError

MIN_STEPS = 3  # step 1 is warm-up; two more to fit anything


@dataclass
class Calibration:
    spec_values: dict
    params: list[tuple[str, float, str]] = field(default_factory=list)  # (spec key, value, how it was fitted)
    sources: list[str] = field(default_factory=list)
    steps: int = 0


@dataclass
class _Steps:
    """Per-step observations pooled over the calibration folders (steps >= 2 unless said)."""

    decode: list[tuple[float, float, float, float]] = field(
        default_factory=list
    )  # (seconds, resp tok, prompt tok, longest)
    old: list[tuple[float, float]] = field(default_factory=list)  # (seconds, tokens)
    ref: list[tuple[float, float]] = field(default_factory=list)
    adv: list[tuple[float, float]] = field(default_factory=list)  # (seconds, samples)
    minibatch: list[tuple[float, float]] = field(default_factory=list)  # (seconds, tokens)
    update_end: list[float] = field(default_factory=list)  # update_actor not in mini-batches, + weight sync
    submit: list[float] = field(default_factory=list)
    returned: list[float] = field(default_factory=list)
    reward: list[float] = field(default_factory=list)
    judge_tokens: list[float] = field(default_factory=list)  # tokens per reward-model call (usage)
    cache: list[tuple[float, float]] = field(default_factory=list)  # (hits, lookups) of the reward cache
    overhead: list[float] = field(default_factory=list)
    first: list[tuple[float, float, float, float, float, float]] = field(
        default_factory=list
    )  # step 1: decode obs + trainer s + tokens
    lengths: list[tuple[float, float, float, float, float]] = field(
        default_factory=list
    )  # mean, min, max, clip, prompt mean
    cores: list[tuple[float, float, float, float, float]] = field(
        default_factory=list
    )  # sync: gen cpu, wall; update cpu, wall; cores


def calibrate(run_dirs: list[Path]) -> Calibration:
    """Fit every cost model to the folders' steps (see the module docstring).

    Raises:
        RunFolderError: a folder lacks config.yaml, metrics.jsonl or trace.json, or holds fewer
            than MIN_STEPS steps with detailed trace spans.
    """
    obs, profile, count = _Steps(), None, 0
    for run_dir in map(Path, run_dirs):
        config, rows, events = _read(run_dir)
        profile = profile or config
        count += _observe(run_dir, config, rows, events, obs)
    if profile is None:
        raise RunFolderError("no run folder given to calibrate on")
    return _fit(profile, obs, [str(p) for p in run_dirs], count)


def _read(run_dir: Path) -> tuple[dict, list[dict], list[dict]]:
    if not run_dir.is_dir():
        raise RunFolderError(f"{run_dir} is not a folder; give a run folder (rlrm train) or a benchmark folder")
    missing = [name for name in ("config.yaml", "metrics.jsonl", "trace.json") if not (run_dir / name).is_file()]
    if missing:
        raise RunFolderError(
            f"{run_dir} has no {' and no '.join(missing)}: calibration reads the run's trace.json (written when "
            f"the run ends), metrics.jsonl and config.yaml; run `rlrm train` (or `rlrm bench reward-latency`) to the end "
            f"with at least {MIN_STEPS} steps"
        )
    config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    rows = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("step", 0) > 0 and "perf/time_per_step" in row:
            rows.append(row)
    try:
        data = json.loads((run_dir / "trace.json").read_text())
    except json.JSONDecodeError as exc:
        raise RunFolderError(
            f"{run_dir / 'trace.json'} is not valid JSON ({exc.msg}); the run may have been killed while writing it"
        ) from None
    events = [e for e in (data.get("traceEvents", []) if isinstance(data, dict) else data) if e.get("ph") == "X"]
    return config, rows, events


def _observe(run_dir: Path, config: dict, rows: list[dict], events: list[dict], obs: _Steps) -> int:
    by_lane: dict[str, list[tuple[float, float, dict, str]]] = {}
    for e in events:
        start = e["ts"] / 1e6
        by_lane.setdefault(e.get("cat", ""), []).append(
            (start, start + e.get("dur", 0.0) / 1e6, e.get("args") or {}, e.get("name", ""))
        )
    for spans in by_lane.values():
        spans.sort(key=lambda s: s[0])
    detailed = sorted({int(s[2]["batch"]) for s in by_lane.get("generate", []) if "batch" in s[2]})
    usable = [r for r in rows if r["step"] in detailed]
    if len(usable) < MIN_STEPS or not by_lane.get("rollout"):
        what = (
            "no decode spans (rollout lane)"
            if not by_lane.get("rollout")
            else f"{len(usable)} step(s) with request spans"
        )
        raise RunFolderError(
            f"{run_dir}/trace.json is too short to fit: {what}; calibration needs at least {MIN_STEPS} steps with "
            f"request, reward and mini-batch spans (step 1 is warm-up), e.g. `rlrm bench reward-latency --steps {MIN_STEPS}` "
            f"or `rlrm train --steps {MIN_STEPS}` (logging.trace_detail_steps >= {MIN_STEPS})"
        )
    profile = _Profile(config)
    n, prompts = int(profile.get("rollout.n", 1)), int(profile.get("data.train_batch_size", 1))
    # a rate-limited judge: the reward phase is paced calls, so fit each call (its span less the wait) instead
    limited = any(profile.get(f"reward.limits.{k}", None) is not None for k in ("rpm", "tpm", "max_concurrent"))
    sync = profile.get("trainer.mode", "sync") == "sync" and not limited
    wait_s = float(profile.get("rollout.batch_wait_ms", 0.0)) / 1000
    cap = int(profile.get("rollout.max_batch_size", 64))
    for row in usable:
        _observe_step(row, by_lane, obs, prompts * n, sync, (wait_s, cap))
    return len(usable)


def _inside(spans, lo: float, hi: float):
    return [s for s in spans if lo - 1e-6 <= s[0] < hi]


def _observe_step(row: dict, lanes: dict, obs: _Steps, generated: int, sync: bool, batching: tuple[float, int]) -> None:
    end = row["perf/wall_s"]
    start = end - row["perf/time_per_step"]
    decodes = _inside(lanes.get("rollout", []), start, end)
    requests = [s for s in lanes.get("generate", []) if s[2].get("batch") == row["step"]]
    samples = max(row.get("batch/num_samples", generated), 1)
    resp = row.get("perf/response_tokens", 0.0) * generated / samples
    prompt = (row.get("perf/total_num_tokens", 0.0) - row.get("perf/response_tokens", 0.0)) * generated / samples
    longest = row.get("response_length/max", 0.0)
    decode_obs = []
    for d_start, d_end, _, _ in decodes:  # a decode batch returns the requests that end with it
        count = sum(1 for r in requests if d_end - 1e-4 <= r[1] <= d_end + 0.25 and r[0] <= d_start + 1e-4)
        if count:
            share = count / len(requests)
            decode_obs.append((d_end - d_start, resp * share, prompt * share, longest, count))
    timing = {k.removeprefix("timing_s/"): v for k, v in row.items() if k.startswith("timing_s/")}
    tokens = float(row.get("perf/total_num_tokens", 0.0))
    minis = [(s[1] - s[0], s[2].get("samples", samples)) for s in _inside(lanes.get("minibatch", []), start, end)]
    if row["step"] == 1:
        busy = sum(timing.get(p, 0.0) for p in ("adv", "old_log_prob", "ref", "update_actor"))
        obs.first.extend((*d[:4], busy, tokens) for d in decode_obs[:1])
        return
    obs.decode.extend(d[:4] for d in decode_obs)
    for phase, size, into in (
        ("old_log_prob", tokens, obs.old),
        ("ref", tokens, obs.ref),
        ("adv", float(samples), obs.adv),
    ):
        if phase in timing:
            into.append((timing[phase], size))
    obs.minibatch.extend((sec, tokens * s / samples) for sec, s in minis)
    obs.update_end.append(
        timing.get("update_actor", 0.0) - sum(sec for sec, _ in minis) + timing.get("update_weights", 0.0)
    )
    if sync and "cpu_s/gen" in row and "cpu_s/update_actor" in row and "perf/cpu_cores" in row:
        obs.cores.append(
            (
                row["cpu_s/gen"],
                timing.get("gen", 0.0),
                row["cpu_s/update_actor"],
                timing.get("update_actor", 0.0),
                float(row["perf/cpu_cores"]),
            )
        )
    obs.lengths.append(
        (
            row.get("response_length/mean", 0.0),
            row.get("response_length/min", 0.0),
            longest,
            row.get("response_length/clip_ratio", 0.0),
            row.get("prompt_length/mean", 0.0),
        )
    )
    if requests and decodes:
        obs.returned.append(max(0.0, max(r[1] for r in requests) - max(d[1] for d in decodes)))
    rewards = [
        s
        for s in lanes.get("reward", [])
        if s[3] == "reward" and s[2].get("batch") == row["step"] and not s[2].get("cached")  # a hit made no call
    ]
    if sync and requests and decode_obs:
        # nothing overlaps: from the step's start to its first decode batch is submission (prompt
        # encoding, request set-up); the whole batch is scored after the last request returned
        waited = batching[0] if decode_obs[0][4] < batching[1] else 0.0  # a batch under the cap waits for more
        obs.submit.append(max(0.0, decodes[0][0] - start - waited))
        waits = _inside(lanes.get("reward_wait", []), start, end)
        if waits:
            obs.reward.append(max(0.0, waits[-1][1] - max(r[1] for r in requests)))
    elif rewards:
        obs.reward.extend(
            s[1] - s[0] - float(s[2].get("injected_latency_s", 0.0)) - float(s[2].get("throttle_wait_s", 0.0))
            for s in rewards
        )
    looked = row.get("reward/cache_hits", 0) + row.get("reward/cache_misses", 0)
    if looked:
        obs.cache.append((row["reward/cache_hits"], looked))
    if row.get("reward/model_calls"):
        used = row.get("reward/judge_prompt_tokens", 0) + row.get("reward/judge_completion_tokens", 0)
        obs.judge_tokens.append(used / row["reward/model_calls"])
    weights = [s for s in lanes.get("trainer", []) if s[3] == "update_weights" and start < s[1] <= end + 1e-6]
    if weights:
        obs.overhead.append(max(0.0, end - weights[-1][1]))


def _median(values: list[float], default: float = 0.0) -> float:
    return float(np.median(values)) if values else default


def _fit(profile: dict, obs: _Steps, sources: list[str], steps: int) -> Calibration:
    p = _Profile(profile)
    if p.get("rollout.backend", "hf") != "hf" or (
        profile.get("simulated") and profile["spec"]["rollout"].get("batching") != "static"
    ):
        raise RunFolderError(
            f"{sources[0]}: calibration fits rlrm's hf engine (static batches); this run used another rollout backend"
        )
    cal = Calibration(spec_values={}, sources=sources, steps=steps)
    values = cal.spec_values

    def put(key: str, value, note: str) -> None:
        *sections, name = key.split(".")
        node = values
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
        if note:
            cal.params.append((key, value, note))

    _workload(p, obs, put)
    _rollout(p, obs, put)
    _reward(p, obs, put)
    _trainer(p, obs, put)
    return cal


class _Profile:
    """Read access to a run's resolved profile (config.yaml) with the schema's defaults; the
    config.yaml of a simulated run (its spec) reads as the profile it stands for."""

    def __init__(self, raw: dict):
        self.raw = _profile_of_spec(raw["spec"], raw.get("trainer", {}).get("mode")) if raw.get("simulated") else raw

    def get(self, path: str, default):
        node = self.raw
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return default if node is None else node


def _profile_of_spec(spec: dict, mode: str | None) -> dict:
    w, r, rw = spec.get("workload", {}), spec.get("rollout", {}), spec.get("reward", {})
    return {
        "data": {"train_batch_size": w.get("prompts_per_step")},
        "rollout": {
            "n": w.get("samples_per_prompt"),
            "max_new_tokens": w.get("max_response_tokens"),
            "max_batch_size": r.get("max_running"),
            "batch_wait_ms": 1000 * r.get("batch_wait_s", 0.0),
        },
        "actor": {
            "mini_batch_size": w.get("mini_batch_prompts"),
            "ppo_epochs": w.get("ppo_epochs"),
            "recompute_old_log_prob": w.get("recompute_old_log_prob"),
            "use_kl_loss": w.get("use_ref"),
        },
        "trainer": {
            "mode": mode,
            "total_steps": w.get("steps"),
            "max_staleness": w.get("max_staleness"),
            "seed": w.get("seed"),
        },
        "reward": {
            "num_workers": rw.get("workers"),
            "max_concurrency": rw.get("max_concurrency"),
            "attempt_timeout_s": rw.get("timeout_s"),
            "max_retries": rw.get("max_retries"),
            "backoff_s": rw.get("backoff_s"),
            "backoff_max_s": rw.get("backoff_max_s"),
            "on_failure": rw.get("on_failure"),
            "inject": {
                "latency": rw.get("latency"),
                "scale": rw.get("latency_scale"),
                "fail_rate": rw.get("fail_rate"),
            },
        },
    }


def _note(fit: CostFit, what: str) -> str:
    extra = f"; not varied enough to fit: {', '.join(fit.dropped)}" if fit.dropped and not fit.proportional else ""
    if fit.proportional:
        extra = f"; taken proportional to {fit.proportional} (nothing varied enough to fit a fixed part)"
    left_out = f" ({fit.outliers} outliers left out)" if fit.outliers else ""
    return f"{what}: {fit.points} points{left_out}, rel. RMS error {fit.rel_error:.1%}{extra}"


def _workload(p: _Profile, obs: _Steps, put) -> None:
    n = int(p.get("rollout.n", 8))
    upper = int(p.get("rollout.max_new_tokens", 20))
    put("workload.steps", int(p.get("trainer.total_steps", 30)), "")
    put("workload.prompts_per_step", int(p.get("data.train_batch_size", 32)), "")
    put("workload.samples_per_prompt", n, "")
    put("workload.max_response_tokens", upper, "")
    put("workload.mini_batch_prompts", int(p.get("actor.mini_batch_size", 32)), "")
    put("workload.ppo_epochs", int(p.get("actor.ppo_epochs", 1)), "")
    put("workload.recompute_old_log_prob", bool(p.get("actor.recompute_old_log_prob", True)), "")
    put("workload.use_ref", bool(p.get("actor.use_kl_loss", False)), "")
    put("workload.max_staleness", int(p.get("trainer.max_staleness", 2)), "")
    put("workload.seed", int(p.get("trainer.seed", 0)), "")
    lengths = np.array(obs.lengths).reshape(-1, 5)
    mean, low, high, clip, prompt = lengths.mean(0) if len(lengths) else (upper / 2, 1, upper, 0, 64)
    samples = int(p.get("data.train_batch_size", 32)) * n
    spread = float(np.mean(lengths[:, 2] - lengths[:, 1]) / expected_range_z(samples)) if len(lengths) else 0.0
    mu, sigma = fit_clipped_normal(float(mean), float(clip), upper, spread)
    put(
        "workload.response_tokens",
        f"normal:{mu:.4g}:{sigma:.4g}",
        f"a normal cut at {upper} with the steps' mean response length {mean:.2f} and clip ratio {clip:.3f}",
    )
    put("workload.prompt_tokens", f"fixed:{round(float(prompt), 2)}", "the steps' mean prompt length")


def _rollout(p: _Profile, obs: _Steps, put) -> None:
    put("rollout.replicas", 1, "")
    put("rollout.batching", "static", "")
    put("rollout.max_running", int(p.get("rollout.max_batch_size", 64)), "")
    put("rollout.batch_wait_s", float(p.get("rollout.batch_wait_ms", 2.0)) / 1000, "")
    put("rollout.colocated_slowdown", *_colocated_slowdown(obs))
    d = np.array(obs.decode).reshape(-1, 4)
    fit = fit_cost(d[:, 0], {"resp": d[:, 1], "longest": d[:, 3], "prompt": d[:, 2]}, proportional_to="resp")
    note = _note(fit, "decode batches vs their tokens")
    put("rollout.batch_overhead_s", fit.intercept, note)
    put("rollout.iteration_s_per_seq", fit.coef["resp"], note)
    put("rollout.iteration_s", fit.coef["longest"], note)
    put("rollout.prefill_s_per_token", fit.coef["prompt"], note)
    if obs.first:
        first = np.array(obs.first)
        excess = first[:, 0] - np.array([fit.predict(resp=r[1], longest=r[3], prompt=r[2]) for r in first])
        put(
            "rollout.first_batch_extra_s",
            max(0.0, float(excess.mean())),
            "step 1's decode batch over the fitted model (warm-up)",
        )
    put(
        "rollout.submit_s",
        _median(obs.submit),
        f"step start to first decode batch, median of {len(obs.submit)} sync steps",
    )
    put(
        "rollout.return_s",
        _median(obs.returned),
        f"last decode batch end to last request returned, median of {len(obs.returned)} steps",
    )


def _colocated_slowdown(obs: _Steps) -> tuple[float, str]:
    """How much generation and training slow each other while both compute in one process (rlrm's hf engine
    shares the trainer's cores). Nothing overlaps in a sync run, but its `cpu_s/*` say how many cores each
    phase keeps busy alone; overlapped, they share the machine's: slowdown = (gen + train) / cores, at least 1."""
    c = np.array(obs.cores).reshape(-1, 5)
    c = c[(c[:, 1] > 0) & (c[:, 3] > 0)]
    if not len(c):
        return 2.0, (
            "not fitted (the sync steps hold no cpu_s/gen, cpu_s/update_actor, perf/cpu_cores: runs made "
            "before rlrm recorded them): generation and training are taken to split the cores evenly"
        )
    gen, train, cores = c[:, 0].sum() / c[:, 1].sum(), c[:, 2].sum() / c[:, 3].sum(), float(np.median(c[:, 4]))
    slowdown = max(1.0, (gen + train) / cores)
    return round(slowdown, 3), (
        f"generation kept {gen:.2f} and training {train:.2f} of {cores:.0f} cores busy alone "
        f"(cpu_s / timing_s over {len(c)} sync steps); overlapped: (gen + train) / cores"
    )


def _reward(p: _Profile, obs: _Steps, put) -> None:
    put("reward.base_s", _median(obs.reward), f"reward call less its injected latency, median of {len(obs.reward)}")
    for key, path, default in (
        ("workers", "reward.num_workers", 4),
        ("max_concurrency", "reward.max_concurrency", 64),
        ("timeout_s", "reward.attempt_timeout_s", p.get("reward.timeout_s", 30.0)),  # a run from before the rename
        ("max_retries", "reward.max_retries", 3),
        ("backoff_s", "reward.backoff_s", 0.1),
        ("backoff_max_s", "reward.backoff_max_s", 5.0),
        ("on_failure", "reward.on_failure", "default"),
        ("fail_rate", "reward.inject.fail_rate", 0.0),
        ("latency", "reward.inject.latency", "none"),
        ("latency_scale", "reward.inject.scale", 1.0),
        ("limits.max_concurrent", "reward.limits.max_concurrent", None),
        ("limits.rpm", "reward.limits.rpm", None),
        ("limits.tpm", "reward.limits.tpm", None),
    ):
        put(f"reward.{key}", p.get(path, default), "")
    hits, looked = (sum(x) for x in zip(*obs.cache)) if obs.cache else (0.0, 0.0)
    put(
        "reward.cache_hit_rate",
        hits / looked if looked else 0.0,
        f"reward cache hits over {int(looked)} lookups ({len(obs.cache)} steps)" if looked else "",
    )
    if obs.judge_tokens:
        tokens = _median(obs.judge_tokens)
        put(
            "reward.limits.tokens_per_call",
            tokens,
            f"judge tokens per call (usage), median of {len(obs.judge_tokens)} steps",
        )


def _trainer(p: _Profile, obs: _Steps, put) -> None:
    fits = {}
    for name, rows, size in (
        ("adv", obs.adv, "sample"),
        ("old_log_prob", obs.old, "token"),
        ("ref", obs.ref, "token"),
        ("minibatch", obs.minibatch, "token"),
    ):
        data = np.array(rows).reshape(-1, 2)
        if not len(data):
            continue
        fits[name] = fit = fit_cost(data[:, 0], {size: data[:, 1]}, proportional_to=size)
        note = _note(fit, f"{name} vs its {size}s")
        put(f"trainer.{name}_s", fit.intercept, note)
        put(f"trainer.{name}_s_per_{size}", fit.coef[size], note)
    put(
        "trainer.weight_sync_s",
        _median(obs.update_end),
        f"update_actor outside mini-batches + update_weights, median of {len(obs.update_end)} steps",
    )
    put(
        "trainer.step_overhead_s",
        _median(obs.overhead),
        f"weight sync end to step end, median of {len(obs.overhead)} steps",
    )
    if obs.first and "minibatch" in fits:
        samples = int(p.get("data.train_batch_size", 32)) * int(p.get("rollout.n", 8))
        minibatches = -(-int(p.get("data.train_batch_size", 32)) // int(p.get("actor.mini_batch_size", 32))) * int(
            p.get("actor.ppo_epochs", 1)
        )
        excess = []
        for *_, busy, tokens in obs.first:  # step 1's trainer phases over what the fitted models give its tokens
            predicted = fits["minibatch"].intercept * minibatches + fits["minibatch"].coef["token"] * tokens * int(
                p.get("actor.ppo_epochs", 1)
            )
            predicted += sum(
                fits[k].predict(**{size: x})
                for k, size, x in (
                    ("adv", "sample", samples),
                    ("old_log_prob", "token", tokens),
                    ("ref", "token", tokens),
                )
                if k in fits
            )
            excess.append(busy - predicted)
        put(
            "trainer.first_step_extra_s",
            max(0.0, float(np.mean(excess))),
            "step 1's trainer phases over the fitted models (warm-up)",
        )
