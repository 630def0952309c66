"""Fit the simulator's cost models to a run folder: its trace.json, metrics.jsonl and config.yaml.

    cal = calibrate([Path("runs/tiny-rule")])      # several folders of one setup pool their steps
    cal.spec_values                                 # a raw spec mapping (spec.spec_from_mapping)
    cal.params                                      # (key, value, fit note) for printing

What is measured where: rlrm/bench/simulate/observe.py (trace.json's lanes, step windows from metrics.jsonl).
Step 1 carries the warm-up: the models are fitted on the later steps and step 1's excess becomes
the spec's warm-up terms. A sync run is the cleanest source: nothing overlaps in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlrm.bench.simulate.fit import CostFit, expected_range_z, fit_clipped_normal, fit_cost
from rlrm.bench.simulate.modes import ON_POLICY
from rlrm.bench.simulate.observe import RunProfile, Steps, observe, read_run
from rlrm.engine.behaviour import needs_recompute
from rlrm.errors import RunFolderError


@dataclass
class Calibration:
    spec_values: dict
    params: list[tuple[str, float, str]] = field(default_factory=list)  # (spec key, value, how it was fitted)
    sources: list[str] = field(default_factory=list)
    steps: int = 0


def calibrate(run_dirs: list[Path]) -> Calibration:
    """Fit every cost model to the folders' steps (see the module docstring).

    Raises:
        RunFolderError: a folder lacks config.yaml, metrics.jsonl or trace.json, or holds fewer
            than MIN_STEPS steps with detailed trace spans.
    """
    obs, profile, count = Steps(), None, 0
    for run_dir in map(Path, run_dirs):
        config, rows, events = read_run(run_dir)
        profile = profile or config
        count += observe(run_dir, config, rows, events, obs)
    if profile is None:
        raise RunFolderError("no run folder given to calibrate on")
    return _fit(profile, obs, [str(p) for p in run_dirs], count)


def _median(values: list[float], default: float = 0.0) -> float:
    return float(np.median(values)) if values else default


def _fit(profile: dict, obs: Steps, sources: list[str], steps: int) -> Calibration:
    p = RunProfile(profile)
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


def _note(fit: CostFit, what: str) -> str:
    extra = f"; not varied enough to fit: {', '.join(fit.dropped)}" if fit.dropped and not fit.proportional else ""
    if fit.proportional:
        extra = f"; taken proportional to {fit.proportional} (nothing varied enough to fit a fixed part)"
    left_out = f" ({fit.outliers} outliers left out)" if fit.outliers else ""
    return f"{what}: {fit.points} points{left_out}, rel. RMS error {fit.rel_error:.1%}{extra}"


def _workload(p: RunProfile, obs: Steps, put) -> None:
    n = int(p.get("rollout.n", 8))
    upper = int(p.get("rollout.max_new_tokens", 20))
    put("workload.steps", int(p.get("trainer.total_steps", 30)), "")
    put("workload.prompts_per_step", int(p.get("data.train_batch_size", 32)), "")
    put("workload.samples_per_prompt", n, "")
    put("workload.max_response_tokens", upper, "")
    put("workload.mini_batch_prompts", int(p.get("actor.mini_batch_size", 32)), "")
    put("workload.ppo_epochs", int(p.get("actor.ppo_epochs", 1)), "")
    put("workload.recompute_old_log_prob", _recomputes(p, obs), "")
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


def _recomputes(p: RunProfile, obs: Steps) -> bool:
    """Whether on-policy steps recompute old log-probs under the run's actor.recompute_old_log_prob (auto, always
    or never; true/false in a simulated run's config), by the trainer's own rule (rlrm/engine/behaviour.py).

    `auto` also compares the engine's dtype with the actor's, which the folder does not hold: an on-policy run's
    steps say it (they log rollout/log_prob_diff_* when they recompute); for an off-policy run, which never
    recomputes, the hf engine is taken to compute as the actor does."""
    setting = p.get("actor.recompute_old_log_prob", "auto")
    setting = {True: "always", False: "never"}.get(setting, setting)
    same = "the actor's"  # the dtype on both sides
    epochs = int(p.get("actor.ppo_epochs", 1))
    return obs.recomputed or needs_recompute(
        setting, off_policy=False, ppo_epochs=epochs, engine_dtype=same, actor_dtype=same
    )


def _rollout(p: RunProfile, obs: Steps, put) -> None:
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


def _colocated_slowdown(obs: Steps) -> tuple[float, str]:
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


def _reward(p: RunProfile, obs: Steps, put) -> None:
    put("reward.base_s", _median(obs.reward), f"reward call less its injected latency, median of {len(obs.reward)}")
    for key, path, default in (
        ("workers", "reward.num_workers", 4),
        ("max_concurrency", "reward.max_concurrency", 64),
        ("timeout_s", "reward.attempt_timeout_s", p.get("reward.timeout_s", 30.0)),  # a run from before the rename
        ("max_retries", "reward.max_retries", 3),
        ("backoff_s", "reward.backoff_s", 0.1),
        ("backoff_max_s", "reward.backoff_max_s", 5.0),
        ("on_failure", "reward.on_failure", "default"),
        ("max_failure_rate", "reward.max_failure_rate", 0.5),
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


def _trainer(p: RunProfile, obs: Steps, put) -> None:
    # the trainer times collation under old_log_prob in every mode: without a recompute in the run's steps, that
    # is all the phase measured, and the simulator charges it as collation (in every mode, recomputing or not)
    recomputed = p.get("trainer.mode", "sync") in ON_POLICY and _recomputes(p, obs)
    fits = {}
    for name, rows, size, key in (
        ("adv", obs.adv, "sample", "adv"),
        ("old_log_prob", obs.old, "token", "old_log_prob" if recomputed else "collate"),
        ("ref", obs.ref, "token", "ref"),
        ("minibatch", obs.minibatch, "token", "minibatch"),
    ):
        data = np.array(rows).reshape(-1, 2)
        if not len(data):
            continue
        fits[name] = fit = fit_cost(data[:, 0], {size: data[:, 1]}, proportional_to=size)
        what = f"{name} vs its {size}s" + (" (collation alone: the run recomputed none)" if key == "collate" else "")
        note = _note(fit, what)
        put(f"trainer.{key}_s", fit.intercept, note)
        put(f"trainer.{key}_s_per_{size}", fit.coef[size], note)
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
