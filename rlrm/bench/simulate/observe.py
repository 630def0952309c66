"""What a run folder shows of its costs, step by step: the observations the simulator's cost models are fitted to
(rlrm/bench/simulate/calibrate.py).

    config, rows, events = read_run(run_dir)      # config.yaml, metrics.jsonl, trace.json's events
    obs = Steps()
    steps = observe(run_dir, config, rows, events, obs)   # pooled into obs; the steps used

Decode batches (`rollout` lane) against their requests (`generate` spans ending with them) and the step's token
counts; the trainer's phases (`timing_s/*`), each mini-batch (`minibatch` spans, with their sample counts); the
reward calls (`reward` spans, less their injected latency); and the gaps the phases leave. Step 1 is kept apart:
it carries the warm-up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rlrm.engine.metrics.trace import session_shifts, shift_of
from rlrm.errors import RunFolderError

MIN_STEPS = 3  # step 1 is warm-up; two more to fit anything


@dataclass
class Steps:
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
    recomputed: bool = False  # a step logged rollout/log_prob_diff_*: the actor recomputed its old log-probs


def read_run(run_dir: Path) -> tuple[dict, list[dict], list[dict]]:
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
    every = data.get("traceEvents", []) if isinstance(data, dict) else data
    shifts = session_shifts(every)  # a resumed run: each session's rows placed on the trace's clock
    for row in rows:
        if isinstance(row.get("perf/wall_s"), (int, float)):
            row["perf/wall_s"] += shift_of(shifts, row["step"])
    events = [e for e in every if e.get("ph") == "X"]
    return config, rows, events


def observe(run_dir: Path, config: dict, rows: list[dict], events: list[dict], obs: Steps) -> int:
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
    profile = RunProfile(config)
    n, prompts = int(profile.get("rollout.n", 1)), int(profile.get("data.train_batch_size", 1))
    # a rate-limited judge: the reward phase is paced calls, so fit each call (its span less the wait) instead
    limited = any(profile.get(f"reward.limits.{k}", None) is not None for k in ("rpm", "tpm", "max_concurrent"))
    sync = profile.get("trainer.mode", "sync") == "sync" and not limited
    wait_s = float(profile.get("rollout.batch_wait_ms", 0.0)) / 1000
    cap = int(profile.get("rollout.max_batch_size", 64))
    for row in usable:
        _observe_step(row, by_lane, obs, prompts * n, sync, (wait_s, cap))
    obs.recomputed = obs.recomputed or any("rollout/log_prob_diff_mean" in r for r in rows)
    return len(usable)


def _inside(spans, lo: float, hi: float):
    return [s for s in spans if lo - 1e-6 <= s[0] < hi]


def _observe_step(row: dict, lanes: dict, obs: Steps, generated: int, sync: bool, batching: tuple[float, int]) -> None:
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


class RunProfile:
    """Read access to a run's resolved profile (config.yaml) with the schema's defaults; the
    config.yaml of a simulated run (its spec) reads as the profile it stands for."""

    def __init__(self, raw: dict):
        self.raw = profile_of_spec(raw["spec"], raw.get("trainer", {}).get("mode")) if raw.get("simulated") else raw

    def get(self, path: str, default):
        node = self.raw
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return default if node is None else node


def profile_of_spec(spec: dict, mode: str | None) -> dict:
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
