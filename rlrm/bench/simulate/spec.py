"""The simulator's input: a workload, a cluster and the cost of each phase (a YAML cluster spec).

    spec = load_spec("examples/cluster-64x32.yaml", overrides=["rollout.replicas=128"])
    spec = spec_from_mapping({...})                 # e.g. what calibrate.py fitted
    key, values = parse_sweep("reward.latency_scale=0.5,1,2")

Every cost is a linear model in what the phase handles (tokens, samples, sequences decoding
together), so a spec can be written from a datasheet or fitted to a run folder. Unknown keys are
errors naming the nearest valid key; resources must be positive. The scheduling modes are the
ones `trainer.mode` of a profile accepts (rlrm/config/schema.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal, cast, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rlrm.config.latency import parse_latency
from rlrm.config.loader import _parse_override, _set_path, _unknown_key_message, read_yaml_text, validate_model
from rlrm.config.schema import TrainerConfig
from rlrm.errors import ConfigError

MODES: tuple[str, ...] = get_args(TrainerConfig.model_fields["mode"].annotation)
MAX_AHEAD_FIXED = {"sync": 0, "stream": 0, "pipeline": 0, "one-step-off": 1}  # fully-async: max_staleness


def _distribution(value: str | float) -> str:
    """A spec of the latency grammar (rlrm.engine.rewards.inject), checked by parsing it."""
    text = str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else cast(str, value)
    parse_latency(text)
    return text


# every sample of a mode's run is held in memory (about 40 bytes each, measured with examples/cluster-gpu.yaml)
MAX_SAMPLES = 50_000_000
# every engine is a row of the rollout state, advanced at every event: 10^5 continuous engines simulate
# examples/cluster-gpu.yaml's 3 steps in 0.3 s, 10^7 take 22 s and 1.6 GB, 10^9 ran out of memory
MAX_REPLICAS = 100_000


class _Section(BaseModel):
    # an infinite cost is refused like a NaN one: a simulation over it has no finite time to report
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class WorkloadSpec(_Section):
    """What one step trains on (the profile's data, rollout and actor sizes)."""

    steps: int = Field(100, gt=0, description="Training steps simulated per mode.")
    prompts_per_step: int = Field(1024, gt=0, description="Prompts per step (data.train_batch_size).")
    samples_per_prompt: int = Field(5, gt=0, description="Samples per prompt, the GRPO group (rollout.n).")
    prompt_tokens: str = Field(
        "fixed:512",
        description="Prompt length in tokens: a distribution in the latency grammar (fixed:S, uniform:A:B, lognormal:MU:SIGMA, trace:PATH, ...).",
    )
    response_tokens: str = Field(
        "uniform:100:1000", description="Response length in tokens, same grammar; clipped to [1, max_response_tokens]."
    )
    max_response_tokens: int = Field(1024, gt=0, description="Longest response (rollout.max_new_tokens).")
    mini_batch_prompts: int = Field(256, gt=0, description="Prompts per optimizer step (actor.mini_batch_size).")
    ppo_epochs: int = Field(1, gt=0, description="Passes over each step's batch (actor.ppo_epochs).")
    recompute_old_log_prob: bool = Field(
        True, description="On-policy modes recompute old log-probs with the actor (actor.recompute_old_log_prob)."
    )
    use_ref: bool = Field(False, description="Reference log-probs are computed every step (actor.use_kl_loss).")
    max_staleness: int = Field(
        2, ge=0, description="fully-async: most policy versions a trained sample may lag (trainer.max_staleness)."
    )
    seed: int = Field(0, description="Seed of every draw (lengths, latencies, failures); modes share the draws.")

    @field_validator("prompt_tokens", "response_tokens", mode="before")
    @classmethod
    def _lengths_parse(cls, value):
        return _distribution(value)


class RolloutSpec(_Section):
    """The generation fleet and its cost: one decode iteration advances every running sequence one token."""

    replicas: int = Field(1, gt=0, description="Rollout engines (each a server with its own batch).")
    batching: Literal["continuous", "static"] = Field(
        "continuous",
        description="continuous: sequences join and leave every iteration (vLLM, SGLang); static: a batch of queued "
        "requests decodes until its longest is done and returns together (rlrm's hf engine).",
    )
    max_running: int = Field(
        256, gt=0, description="Sequences one engine decodes at once (static: rollout.max_batch_size)."
    )
    iteration_s: float = Field(0.02, ge=0, description="Seconds of one decode iteration, fixed part.")
    iteration_s_per_seq: float = Field(0.0, ge=0, description="Seconds added to an iteration per sequence in it.")
    prefill_s_per_token: float = Field(
        0.0, ge=0, description="Seconds of prefill per prompt token (the engine decodes nothing meanwhile)."
    )
    batch_overhead_s: float = Field(0.0, ge=0, description="static: fixed seconds per decode batch.")
    batch_wait_s: float = Field(
        0.0, ge=0, description="static: wait for more requests before a batch starts (rollout.batch_wait_ms)."
    )
    submit_s: float = Field(
        0.0, ge=0, description="From a batch's launch until its requests are queued at the engines."
    )
    return_s: float = Field(
        0.0, ge=0, description="From a request's last token until its completion reaches the rollouter."
    )
    first_batch_extra_s: float = Field(0.0, ge=0, description="Warm-up: added to the first decode batch of a run.")
    colocated_slowdown: float = Field(
        1.0,
        ge=1.0,
        allow_inf_nan=False,
        description="static, one engine on the trainer's device (rlrm's hf engine): while it decodes and the trainer "
        "computes, both run this many times slower (1: separate devices; 2: they split the device evenly).",
    )


class LimitsSpec(_Section):
    """A hosted judge's rate limits (profile `reward.limits`): one budget for the whole run."""

    max_concurrent: int | None = Field(None, gt=0, description="Most reward calls in flight over every worker.")
    rpm: float | None = Field(None, gt=0, description="Most reward calls per minute (calls are paced: 60/rpm s apart).")
    tpm: float | None = Field(
        None, gt=0, description="Most judge tokens per minute (each call counts tokens_per_call)."
    )
    tokens_per_call: float = Field(
        500.0, gt=0, description="Judge tokens one call counts against tpm (prompt + completion, as `usage` reports)."
    )

    def pace_s(self) -> float:
        """Seconds between two calls' departures the budget allows (0: no rate limit)."""
        return max(60.0 / self.rpm if self.rpm else 0.0, self.tokens_per_call * 60.0 / self.tpm if self.tpm else 0.0)


class RewardSpec(_Section):
    """The reward loop: per-sample latency, concurrency, retries and the failure policy (profile `reward.*`)."""

    latency: str = Field(
        "none", description="Latency per reward call in the latency grammar (reward.inject.latency), e.g. uniform:1:40."
    )
    latency_scale: float = Field(
        1.0, ge=0, allow_inf_nan=False, description="Multiplies every latency drawn (reward.inject.scale)."
    )
    base_s: float = Field(0.0, ge=0, description="The reward function's own seconds per call, added to the latency.")
    workers: int = Field(
        4, gt=0, description="Reward-loop workers (reward.num_workers); sample i goes to worker i mod workers."
    )
    max_concurrency: int = Field(
        64, gt=0, description="Calls in flight per worker (reward.max_concurrency); more wait in line."
    )
    fail_rate: float = Field(0.0, ge=0, le=1, description="Chance that an attempt fails (reward.inject.fail_rate).")
    cache_hit_rate: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of samples the reward cache answers (a run's reward/cache_hit_rate): no latency, no "
        "worker or rate-limit slot, no attempt, never failed.",
    )
    timeout_s: float = Field(
        30.0, gt=0, description="An attempt longer than this fails as a timeout (reward.attempt_timeout_s)."
    )
    max_retries: int = Field(3, ge=0, le=1000, description="Retries of a failed attempt (reward.max_retries).")
    backoff_s: float = Field(
        0.1, ge=0, description="First retry delay, doubling, each jittered x[0.5, 1.0) (reward.backoff_s)."
    )
    backoff_max_s: float = Field(5.0, ge=0, description="Longest retry delay, jitter included (reward.backoff_max_s).")
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    on_failure: Literal["default", "drop-group", "fail"] = Field(
        "default",
        description="After the last retry: keep the sample with a set score, drop its group, or stop the run.",
    )
    max_failure_rate: float = Field(
        0.5,
        ge=0,
        le=1,
        description="The simulated run stops, as training would, at the first step where more than this share of "
        "the samples scored failed after their retries, defaulted or dropped (reward.max_failure_rate); 1: never.",
    )

    @field_validator("latency", mode="before")
    @classmethod
    def _latency_parses(cls, value):
        return _distribution(value)


class ToolsSpec(_Section):
    """Tool calls of multi-turn rollouts (profile `rollout.agent`): their latency stretches each trajectory.

    A trajectory makes `calls_per_sample` calls, each sleeping a draw of `latency` cut at `timeout_s` (a
    timed-out call returns at the timeout, as rlrm/engine/agent/tools.py does); the sum is added to its
    generation. While a call runs the sequence decodes nothing and holds no decode slot, so the engine's
    other sequences are not slowed (continuous batching; each turn is a request of its own).
    """

    calls_per_sample: float = Field(
        0.0,
        ge=0,
        le=64,
        description="Tool calls per trajectory; a fraction is a mean (2.3: 2 calls, 3 for 30% of the samples), as "
        "agent/tool_calls / samples of a measured run gives it.",
    )
    latency: str = Field(
        "none", description="Latency of one tool call in the latency grammar (rollout.agent.inject.latency)."
    )
    timeout_s: float = Field(
        10.0, gt=0, description="A call longer than this returns at it (rollout.agent.tool_timeout_s)."
    )

    @field_validator("latency", mode="before")
    @classmethod
    def _latency_parses(cls, value):
        return _distribution(value)


class TrainerSpec(_Section):
    """The trainer's phase costs. Per-token costs are one rank's; they are divided by `ranks`."""

    ranks: int = Field(1, gt=0, description="Training ranks (actor.world_size) sharing every per-token cost.")
    collate_s: float = Field(
        0.0, ge=0, description="Collating a batch (every mode; timed with the old log-probs, as the trainer does)."
    )
    collate_s_per_token: float = Field(0.0, ge=0, description="Collating: seconds per token (prompt + response).")
    adv_s: float = Field(0.0, ge=0, description="The advantages, once the scores are in: fixed seconds.")
    adv_s_per_sample: float = Field(0.0, ge=0, description="The advantages: seconds per sample.")
    old_log_prob_s: float = Field(
        0.0, ge=0, description="Old log-probs (on-policy modes, when recomputed): fixed seconds."
    )
    old_log_prob_s_per_token: float = Field(
        0.0, ge=0, description="Old log-probs: one rank's seconds per token (prompt + response)."
    )
    ref_s: float = Field(0.0, ge=0, description="Reference log-probs (workload.use_ref): fixed seconds.")
    ref_s_per_token: float = Field(0.0, ge=0, description="Reference log-probs: one rank's seconds per token.")
    minibatch_s: float = Field(0.0, ge=0, description="One optimizer step on a mini-batch: fixed seconds.")
    minibatch_s_per_token: float = Field(
        1e-4, ge=0, description="One optimizer step: one rank's seconds per token of the mini-batch."
    )
    weight_sync_s: float = Field(
        0.0, ge=0, description="Ending the update and pushing weights to the rollout engines (the engines pause)."
    )
    step_overhead_s: float = Field(
        0.0, ge=0, description="Serial bookkeeping per step outside the phases above (metrics, prompt encoding)."
    )
    first_step_extra_s: float = Field(0.0, ge=0, description="Warm-up: added to the first step's trainer work.")


class OutputSpec(_Section):
    """What the simulated trace.json of each mode holds."""

    trace_detail_steps: int = Field(
        5,
        ge=0,
        description="Steps whose requests, reward calls and mini-batches become trace spans (phases: every step).",
    )
    trace_max_samples: int = Field(
        512, gt=0, description="Most requests and reward calls per step in the trace (an even subset beyond)."
    )


class SimSpec(_Section):
    """A complete simulation input."""

    description: str = Field("", description="One line saying what this spec models.")
    # a Literal built from trainer.mode's values at run time, which a type checker cannot read
    modes: list[Literal[MODES]] = Field(  # type: ignore[valid-type]
        list(MODES), min_length=1, description="Scheduling modes simulated (trainer.mode values)."
    )
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    reward: RewardSpec = Field(default_factory=RewardSpec)
    tools: ToolsSpec = Field(default_factory=ToolsSpec)
    trainer: TrainerSpec = Field(default_factory=TrainerSpec)
    output: OutputSpec = Field(default_factory=OutputSpec)

    @model_validator(mode="after")
    def _check_size(self) -> "SimSpec":
        if self.rollout.replicas > MAX_REPLICAS:
            raise ValueError(
                f"rollout.replicas = {self.rollout.replicas:,}: the simulator takes at most {MAX_REPLICAS:,} engines "
                "(each is state it advances at every event; engines beyond the sequences in flight sit idle)"
            )
        w = self.workload
        samples = w.steps * w.prompts_per_step * w.samples_per_prompt
        if samples > MAX_SAMPLES:
            raise ValueError(
                f"workload.steps x prompts_per_step x samples_per_prompt = {samples:,} samples per mode; the simulator "
                f"holds at most {MAX_SAMPLES:,} (about {MAX_SAMPLES * 40 / 2**30:.0f} GiB): lower workload.steps to "
                f"{max(1, MAX_SAMPLES // (w.prompts_per_step * w.samples_per_prompt)):,} or fewer (the speedups settle "
                "after a few dozen steps)"
            )
        return self

    @field_validator("modes")
    @classmethod
    def _modes_once(cls, modes: list[str]) -> list[str]:
        twice = named_twice(modes)
        if twice:
            raise ValueError(twice)
        return modes

    @model_validator(mode="after")
    def _check_batches(self) -> "SimSpec":
        w = self.workload
        if self.rollout.colocated_slowdown > 1 and (self.rollout.batching != "static" or self.rollout.replicas != 1):
            raise ValueError(
                "rollout.colocated_slowdown > 1 models one static engine on the trainer's device (rlrm's hf "
                "engine; a calibration sets it): with rollout.replicas > 1 or continuous batching, the "
                "engines have devices of their own: set rollout.colocated_slowdown=1"
            )
        if w.prompts_per_step % w.mini_batch_prompts:
            raise ValueError(
                f"workload.prompts_per_step ({w.prompts_per_step}) must be a multiple of "
                f"workload.mini_batch_prompts ({w.mini_batch_prompts})"
            )
        return self

    def max_ahead(self, mode: str) -> int:
        """Policy versions a batch may run ahead of the trainer in `mode` (the rollouter's max_ahead)."""
        return MAX_AHEAD_FIXED.get(mode, self.workload.max_staleness)


def named_twice(modes: Sequence[str]) -> str | None:
    """What is wrong with a list of modes that names one twice, or None: each mode's runs have one folder, and a
    second would meet the first's (here and in `rlrm bench reward-latency`)."""
    twice = sorted({m for m in modes if list(modes).count(m) > 1})
    return f"names {', '.join(twice)} twice; name each mode once (--repeats runs it again)" if twice else None


def load_spec(
    path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (), base: dict | None = None
) -> SimSpec:
    """A spec from a YAML file (or `base`, or the defaults), with `a.b=c` overrides applied.

    Raises:
        ConfigError: a missing or invalid file, an unknown key (naming the nearest one), a bad value.
    """
    raw = dict(base or {})
    source = "spec"
    if path is not None:
        path = Path(path)
        source = str(path)
        if not path.is_file():
            raise ConfigError(f"spec file {path} does not exist")
        loaded = read_yaml_text(path) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: a spec must be a mapping of sections, got {type(loaded).__name__}")
        raw = _merge(raw, loaded)
    set_keys = []
    for item in overrides:
        key, value = _parse_override(item)
        check_key(key)
        _set_path(raw, key, value)
        set_keys.append(key)
    return spec_from_mapping(raw, source, set_keys)


def spec_from_mapping(raw: dict, source: str = "spec", set_keys: Sequence[str] = ()) -> SimSpec:
    """Validate a raw mapping as a SimSpec, with the loader's one-line errors (a bad `--set` value named so)."""
    return validate_model(raw, SimSpec, source, what="spec", set_keys=set_keys)


def check_key(key: str) -> None:
    """Raise ConfigError unless `key` (a.b.c) names a field of the spec, naming the nearest one."""
    model: type[BaseModel] | None = SimSpec
    walked: list[str] = []
    for part in key.split("."):
        if model is None:
            raise ConfigError(f"spec key {key!r}: {'.'.join(walked)} has no sub-keys")
        fields = model.model_fields
        if part not in fields:
            raise ConfigError(
                _unknown_key_message(".".join(walked + [part]), part, list(fields)).replace(
                    "unknown key", "unknown spec key"
                )
            )
        walked.append(part)
        annotation = fields[part].annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    if model is not None:
        raise ConfigError(f"spec key {key!r} is a section; name one of its keys ({', '.join(model.model_fields)})")


def parse_sweep(text: str) -> tuple[str, list[str]]:
    """`KEY=V1,V2,...` -> (key, [override strings]); the key must exist and each value must validate."""
    key, sep, values = text.partition("=")
    key = key.strip()
    items = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or not key or not items:
        raise ConfigError(f"--sweep {text!r} must look like KEY=V1,V2,... (e.g. reward.latency_scale=0.5,1,2)")
    check_key(key)
    return key, [f"{key}={v}" for v in items]


def dump_spec(spec: SimSpec) -> str:
    """The resolved spec as YAML (what ran)."""
    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)


def _merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
