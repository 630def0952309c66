"""The `reward` section of a profile: which reward, served how, and what happens when it fails."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from rlrm.config.inject import LatencyInjectConfig
from rlrm.config.judge_template import check_template_fields
from rlrm.config.ray_address import check_ray_address
from rlrm.config.reward_cache import RewardCacheConfig
from rlrm.config.reward_guard import GuardConfig
from rlrm.config.rubric import RubricConfig, check_rubric
from rlrm.config.section import Section
from rlrm.config.servers import ServerFleetConfig
from rlrm.launch.common.auth import key_from_env
from rlrm.launch.fleet.spec import FleetSpec

_HEADER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

DEFAULT_JUDGE_TEMPLATE = (
    "Is the answer to this problem correct?\n"
    "Problem: {question}\n"
    "Answer: {response}\n"
    "Work it out, then end with 'Score: 10' if the answer is correct or 'Score: 0' if it is not."
)


LegacyDtype = Literal["bf16", "fp16", "fp32"]  # compute dtypes of the legacy FSDP2 DisRM scorer


class RewardServerConfig(ServerFleetConfig):
    """The reward-model servers: launched by rlrm, or already running at `addresses` (keys shared with rollout.server)."""

    section: ClassVar[str] = "reward.server"

    model: str | None = Field(
        None, description="Reward model: HF folder or hub id (needed by disrm, genrm, composite)."
    )
    headers_env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra HTTP headers of every request to the reward servers (readiness check included), as header "
        "name -> name of the environment variable holding its value, e.g. {OpenAI-Organization: MY_ORG}; the values "
        "are read at start and never written to a profile or the run folder. The bearer key is api_key_env's.",
    )

    @field_validator("headers_env")
    @classmethod
    def _headers_name_variables(cls, headers: dict[str, str]) -> dict[str, str]:
        for header, variable in headers.items():
            if not _HEADER.fullmatch(header):
                raise ValueError(f"headers_env: {header!r} is not an HTTP header name (letters, digits, - and _)")
            if header.lower() == "authorization":
                raise ValueError("headers_env: the Authorization header is api_key_env's; name its variable there")
            if not _ENV_NAME.fullmatch(variable):
                raise ValueError(
                    f"headers_env.{header}: {variable!r} is not an environment variable name; give the variable's "
                    "name, never the value"
                )
        return headers

    def read_headers(self) -> dict[str, str]:
        """The headers `headers_env` names, their values read now (ConfigError naming an unset variable)."""
        return {h: key_from_env(v, f"{self.section}.headers_env.{h}") for h, v in self.headers_env.items()}

    def fleet_spec(self) -> FleetSpec:
        """The base settings, with the model that running `addresses` must serve."""
        return replace(super().fleet_spec(), model=self.model)

    request_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Longest one HTTP request to a reward server or hosted API may take: a judge's chat completion, "
        "a DisRM's /classify, a custom function's call through reward_router_address, each readiness probe at start. "
        "A request past it fails as a timeout (retried as reward.max_retries says); reward.attempt_timeout_s bounds "
        "it too.",
    )

    @property
    def request_model(self) -> str | None:
        """The `model` every request names: served_model_name when set, else the model as written."""
        return self.served_model_name or self.model


class DisRMConfig(Section):
    max_length: int = Field(
        512,
        gt=0,
        description="Longest conversation the DisRM scores, in tokens (a DisRM with fewer positions: its positions, "
        "said once as the run starts).",
    )
    too_long: Literal["truncate", "error"] = Field(
        "truncate", description="Keep the last max_length tokens, or fail the sample."
    )
    scorer: Literal["served", "legacy"] = Field(
        "served",
        description=(
            "served: reward servers over /classify (the reward loop, fp32); legacy: in the trainer, an FSDP2 worker "
            "group as verl's legacy reward-model worker (for parity runs)."
        ),
    )
    legacy_dtype: LegacyDtype = Field("bf16", description="scorer=legacy: FSDP2 compute dtype.")
    legacy_world_size: int = Field(1, ge=1, description="scorer=legacy: ranks sharding the reward model.")
    legacy_micro_batch: int = Field(8, gt=0, description="scorer=legacy: samples per forward.")
    legacy_device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="scorer=legacy: the ranks' device (auto: cuda when one is visible, as `rlrm parity disrm "
        "--device auto`; cuda: nccl, one GPU per rank).",
    )


class GenRMConfig(Section):
    template: str = Field(
        DEFAULT_JUDGE_TEMPLATE,
        description="Judge prompt with {question}, {response} and optionally {reference} and {turns} (an agent "
        "trajectory's turns, tool calls and observations, one per line; docs/agentic.md).",
    )
    verdict: Literal["score", "boxed"] = Field(
        "score",
        description="Parse 'Score: N' or '\\boxed{N}' (the last one, after a reasoning judge's last </think>).",
    )
    max_score: float = Field(10.0, gt=0, description="The verdict that means fully correct (scores are divided by it).")
    max_tokens: int = Field(48, gt=0, description="Judge response budget.")
    temperature: float = Field(
        0.0,
        ge=0.0,
        description="Judge sampling temperature. Above 2 is refused at start where the SGLang router is in front of "
        "the judge (it answers every such request 400): set reward.server.router=client for more.",
    )
    price_per_mtok_input: float = Field(
        0.0, ge=0.0, description="Price of 1M prompt tokens sent to the reward model (reward/cost; 0: not counted)."
    )
    price_per_mtok_output: float = Field(
        0.0, ge=0.0, description="Price of 1M completion tokens the reward model wrote (reward/cost)."
    )


class CompositeConfig(Section):
    mode: Literal["weighted", "gate"] = Field(
        "weighted", description="Weighted sum of rule and model, or the rule gating the model."
    )
    rule_weight: float = Field(0.5, description="Weight of the rule score (weighted mode).")
    model_weight: float = Field(0.5, description="Weight of the model score (weighted mode).")
    model_kind: Literal["disrm", "genrm"] = Field("genrm", description="Which model kind the composite calls.")


class CustomRewardConfig(Section):
    """A reward function of your own (reward.kind: custom), with verl's contract:
    `[async] def compute_score(data_source, solution_str, ground_truth, extra_info) -> float | dict` (a dict holds
    `score` and any extra keys; a numpy scalar or 0-d tensor reads as a float; a bool, text or a score beyond
    float32's range is a counted failure). The arguments go by name, as verl passes them, to a function whose
    parameters bear these names (in any order), and by position otherwise. Set reward.kind: custom (a path alone
    is refused). With reward.server.model set, the reward servers are started (or reached at addresses) and a
    function that takes `reward_router_address` (or `**kwargs`) gets `host:port` of a forwarder to them, and
    `reward_model_tokenizer` the served model's tokenizer; without it both are None (and `**kwargs` gets neither). A sync function runs
    in worker processes that are killed past the timeout (`isolation`). The file is imported as Python code: only
    name files you trust."""

    path: str | None = Field(
        None, description="The Python file that defines the function (needed by reward.kind=custom)."
    )
    name: str = Field(
        "compute_score", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="The function's name in that file."
    )
    isolation: Literal["auto", "process", "thread"] = Field(
        "auto",
        description="Where the function runs. process: in worker processes (reward.custom.processes); a call past "
        "reward.attempt_timeout_s is killed with its worker, which is replaced. thread: in the trainer process (a sync "
        "function on a thread of its own, an async one on an event loop of its own); a call past the timeout is "
        "abandoned, not stopped. auto: process for a sync function, thread for an async one (it yields).",
    )
    processes: int = Field(
        0, ge=0, description="Worker processes with isolation=process (0: the machine's cores, at most 8)."
    )
    model_role: Literal["genrm", "disrm"] = Field(
        "genrm",
        description="With reward.server.model: what the served model is, a generative judge (chat, completions, "
        "/generate) or a sequence classifier (/classify).",
    )

    @field_validator("path")
    @classmethod
    def _path_is_python_file(cls, value: str | None) -> str | None:
        from pathlib import Path

        if value is not None and (not value.endswith(".py") or not Path(value).expanduser().is_file()):
            raise ValueError(
                f"{value!r} is not a Python file (.py) that exists; give the file defining the reward function"
            )
        # absolute, so that config.yaml names the same file whatever folder a resumed run starts from
        return None if value is None else str(Path(value).expanduser().resolve())


class InjectConfig(LatencyInjectConfig):
    """Latency and failures added to every reward call, to measure what scheduling hides (off by default)."""

    fail_rate: float = Field(0.0, description="Chance that an attempt fails (retried, then reward.on_failure).")

    @field_validator("fail_rate")
    @classmethod
    def _fail_rate_is_probability(cls, value: float) -> float:
        if not 0.0 <= value <= 1.0:
            raise ValueError("fail_rate must be a probability in [0, 1]")
        return value

    @property
    def active(self) -> bool:
        """True when it injects anything: a latency that is not always 0, or failures."""
        return self.fail_rate > 0 or self.latency_dist() is not None


class RewardLimitsConfig(Section):
    """A hosted judge's rate limits, enforced for the whole run: one budget shared by every reward worker."""

    max_concurrent: int | None = Field(None, gt=0, description="Most reward-model requests in flight (None: no cap).")
    rpm: float | None = Field(None, gt=0, description="Most reward-model requests per minute (None: no cap).")
    tpm: float | None = Field(
        None,
        gt=0,
        description="Most tokens per minute (a request counts its max_tokens plus its prompt estimated at 4 characters "
        "a token, corrected by the usage the server returns; None: no cap).",
    )
    max_retry_after_s: float = Field(
        60.0, gt=0, description="Longest wait a 429/503 Retry-After is honoured for (a longer one is capped, and said)."
    )

    @property
    def active(self) -> bool:
        return any(v is not None for v in (self.max_concurrent, self.rpm, self.tpm))


RULE_COMPONENTS = ("correct", "format")  # what the GSM8K rule can report (rlrm/engine/rewards/rule.py)


def check_component_weights(kind: str, weights: dict[str, float]) -> None:
    """Weights (finite: pydantic refuses inf and NaN here) of components the reward can report."""
    for name in weights:
        if not name or "/" in name:
            raise ValueError(f"reward.component_weights: {name!r} is not a component name (no '/', not empty)")
    if kind == "rule" and set(weights) - set(RULE_COMPONENTS):
        unknown = ", ".join(sorted(set(weights) - set(RULE_COMPONENTS)))
        raise ValueError(
            f"reward.component_weights names {unknown}, which the rule does not report; "
            f"the rule's components are {', '.join(RULE_COMPONENTS)}"
        )
    if weights and kind in ("disrm", "genrm", "composite"):
        raise ValueError(
            f"reward.component_weights: reward.kind={kind} returns one score, no components; "
            "use reward.kind=custom (a function returning 'reward_components') or rule"
        )


class OverlongConfig(Section):
    """The soft overlong penalty of verl's DAPO reward manager (`overlong_buffer_cfg`), added once to every scored
    sample whatever the reward kind: with L = rollout.max_new_tokens, a response longer than L - buffer_len tokens
    loses penalty_factor x (its tokens past L - buffer_len) / buffer_len, i.e. up to penalty_factor at L."""

    buffer_len: int | None = Field(
        None, gt=0, description="Tokens before rollout.max_new_tokens where the penalty starts (None: no penalty)."
    )
    penalty_factor: float = Field(1.0, ge=0.0, description="The penalty of a response that reaches max_new_tokens.")

    @property
    def active(self) -> bool:
        return self.buffer_len is not None


class RewardConfig(Section):
    """Where scores come from and how failures are handled."""

    kind: Literal["rule", "disrm", "genrm", "composite", "custom", "rubric"] = Field(
        "rule",
        description="Reward kind (custom: a function of your own, see reward.custom; rubric: judge criteria, see "
        "reward.rubric).",
    )
    rule: Literal["gsm8k", "math"] = Field(
        "gsm8k",
        description=(
            "How an answer is checked against the ground truth, by the rule reward, held-out accuracy (val/*), a "
            "model reward's reward/rule_agreement and `rlrm inspect reward`: gsm8k, the last `#### N` of a response "
            "(reward.method) equal to a numeric ground truth; math, the last `\\boxed{...}` equal to a text "
            "ground truth after normalising its LaTeX, as verl's math_reward.py does (data.source: math)."
        ),
    )
    method: Literal["strict", "flexible"] = Field(
        "strict", description="GSM8K answer extraction (reward.rule gsm8k): the last `#### N`, or the last number."
    )
    format_score: float = Field(0.0, description="Rule score of a well-formed but wrong answer.")
    score: float = Field(1.0, description="Rule score of a correct answer.")
    num_workers: int = Field(4, ge=1, description="Reward-loop workers.")
    executor: Literal["local", "ray"] = Field(
        "local", description="Workers as in-process async tasks, or Ray actors spread over the cluster's nodes."
    )
    ray_address: str | None = Field(
        None,
        description=(
            "Ray cluster to join (None: actor.ray_address, else the one already initialised, else RAY_ADDRESS as "
            "`ray job submit` sets it, else a new local one). One run joins one Ray: set, the actor ranks and the "
            "rollout servers join it too (set both, they must be the same)."
        ),
    )
    max_concurrency: int = Field(64, ge=1, description="Samples in flight per worker.")
    attempt_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Deadline of one attempt at one sample's reward: the reward function's whole call, every model "
        "request it makes and every wait for a rate-limit slot included (a custom function's wait for a free worker "
        "process is not: its deadline starts when it gets one). Past it the attempt fails as a timeout "
        "(reward/timeouts, hung_rewards.jsonl) and is retried as reward.max_retries says; a custom function in a "
        "worker process (reward.custom.isolation) is killed with its worker.",
    )
    max_retries: int = Field(3, ge=0, description="Retries for 5xx, timeouts and connection errors (never 4xx).")
    backoff_s: float = Field(
        0.1, ge=0, description="First retry delay; doubles each retry (each delay jittered: half to all of it)."
    )
    backoff_max_s: float = Field(5.0, ge=0, description="Longest retry delay (jitter included).")
    on_failure: Literal["default", "drop-group", "fail"] = Field(
        "default",
        description="After the last retry: a set score (counted), drop the sample's group (counted), or stop.",
    )
    max_failure_rate: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="Stop the run (with the failure kinds and the last error) when more than this share of a step's "
        "samples failed after their retries, whether defaulted or dropped; 1: never stop.",
    )
    default_score: float = Field(
        0.0,
        allow_inf_nan=True,
        description="Score used by on_failure=default (NaN allowed: parity reports NaN scores as failures).",
    )
    placement: Literal["standalone", "colocated"] = Field(
        "standalone",
        description=(
            "standalone: reward servers in their own processes, scoring while generation goes on; colocated: the "
            "reward model shares the policy's device and sleeps (weights off the accelerator) except while it scores "
            "(needs trainer.mode=sync and servers rlrm launches, on its own server: reward.server.backend=embedded)."
        ),
    )
    agreement_threshold: float | None = Field(
        None,
        description="reward/rule_agreement: the score at and above which the trained reward's verdict is 'correct' "
        "(unset: 0 for a DisRM's logit, 0.5 for a GenRM's normalised verdict and for a custom function; a composite "
        "is judged by its model part). Not used with the rule itself.",
    )
    component_weights: dict[str, float] = Field(
        default_factory=dict,
        description="Named reward components and their weights: {name: weight}. A custom function returns them in "
        "'reward_components' ({'score': s, 'reward_components': {name: value}}, NeMo Gym's shape) or as top-level "
        "keys of its dict (verl's gdpo_reward_keys shape); the rule offers 'correct' (answer right) and 'format' "
        "(an answer found). Empty: a custom function's 'reward_components' as returned, each weight 1. Every "
        "component is logged (reward/component/<name>/*); algorithm.component_norm=gdpo trains on them.",
    )
    tool_rewards_as_turn_scores: bool = Field(
        False,
        description="Agent trajectories: add the reward a tool returned for the call that ended an assistant turn "
        "to that turn's reward ('turn_scores'), which lands on the turn's last generated token and adds to the "
        "sample's return in GRPO (docs/agentic.md). Off: tool rewards only reach the reward function, in "
        "extra_info['tool_rewards'].",
    )
    allow_contract_change: bool = Field(
        False,
        description="On --resume, go on when the reward contract (model, template, parser, weights...: `rlrm inspect "
        "reward`) differs from the one the run was started with; the change is recorded in reward_contract.json. "
        "False: stop with one line naming what changed.",
    )
    cache: RewardCacheConfig = Field(default_factory=RewardCacheConfig)
    server: RewardServerConfig = Field(default_factory=RewardServerConfig)
    custom: CustomRewardConfig = Field(default_factory=CustomRewardConfig)
    disrm: DisRMConfig = Field(default_factory=DisRMConfig)
    genrm: GenRMConfig = Field(default_factory=GenRMConfig)
    composite: CompositeConfig = Field(default_factory=CompositeConfig)
    rubric: RubricConfig = Field(default_factory=RubricConfig)
    inject: InjectConfig = Field(default_factory=InjectConfig)
    limits: RewardLimitsConfig = Field(default_factory=RewardLimitsConfig)
    overlong: OverlongConfig = Field(default_factory=OverlongConfig)
    guard: GuardConfig = Field(default_factory=GuardConfig)

    @field_validator("ray_address")
    @classmethod
    def _ray_address(cls, value: str | None) -> str | None:
        return check_ray_address(value)

    @model_validator(mode="after")
    def _check(self) -> "RewardConfig":
        check_template_fields(self.genrm.template)
        if self.kind == "rubric":
            check_rubric(self.rubric, self.component_weights)
        if self.kind == "custom" and not self.custom.path:
            raise ValueError(
                "reward.kind=custom needs reward.custom.path (the Python file defining the reward function)"
            )
        if self.kind != "custom" and self.custom.path:  # verl takes a path alone as the switch; rlrm names the kind
            raise ValueError(
                f"reward.custom.path is set but reward.kind is {self.kind}, so the function would not be called: set "
                "reward.kind=custom to score with it, or reward.custom.path=null to score without it"
            )
        if self.kind == "custom" and self.server.addresses and not self.server.model:
            raise ValueError(
                "reward.server.addresses needs reward.server.model with reward.kind=custom (the served model's name, "
                "whose tokenizer the function gets)"
            )
        if self.model_kind and not self.server.model:
            raise ValueError(f"reward.kind={self.kind} needs reward.server.model (the reward model's folder or hub id)")
        if self.disrm.scorer == "legacy" and (self.kind != "disrm" or self.executor == "ray" or self.server.addresses):
            raise ValueError(
                "reward.disrm.scorer=legacy scores in the trainer process: it needs reward.kind=disrm, "
                "executor local and no server.addresses"
            )
        check_component_weights(self.kind, self.component_weights)
        rpm = self.limits.rpm
        # a request waits for its slot inside its attempt (rewards/metered.py): the attempt's deadline is what it meets
        deadline = self.attempt_timeout_s
        if rpm is not None and 60.0 / rpm > deadline:  # every request but the first would wait past its deadline
            raise ValueError(
                f"reward.limits.rpm={rpm:g} spaces reward-model requests {60.0 / rpm:.3g} s apart, longer than "
                f"reward.attempt_timeout_s={deadline:g}: they would time out waiting for their turn; set rpm to at "
                f"least {60.0 / deadline:.3g} (or raise reward.attempt_timeout_s)"
            )
        tpm = self.limits.tpm
        least = self.genrm.max_tokens  # one judge request costs its answer budget at least (its prompt besides)
        if tpm is not None and self.model_kind == "genrm" and self.kind != "custom" and least * 60.0 / tpm > deadline:
            raise ValueError(
                f"reward.limits.tpm={tpm:g} spaces judge requests of reward.genrm.max_tokens={least} tokens at least "
                f"{least * 60.0 / tpm:.3g} s apart, longer than reward.attempt_timeout_s={deadline:g}: they would time "
                f"out waiting for their turn; set tpm to at least {least * 60.0 / deadline:.3g} (or raise "
                "reward.attempt_timeout_s)"
            )
        if self.placement == "colocated" and (not self.model_kind or self.server.addresses or self.executor == "ray"):
            raise ValueError(
                "reward.placement=colocated needs a reward model served by rlrm itself (kind disrm, genrm, rubric or "
                "composite, or custom with server.model; no server.addresses, executor local); use placement=standalone "
                "otherwise"
            )
        if self.placement == "colocated" and self.model_kind == "disrm" and self.disrm.scorer == "legacy":
            raise ValueError(
                "reward.placement=colocated puts served reward models to sleep; the legacy DisRM in the trainer has "
                "none to sleep: use reward.disrm.scorer=served, or placement=standalone"
            )
        if self.placement == "colocated" and self.server.backend != "embedded":
            # vLLM serves /sleep only in its dev mode with --enable-sleep-mode, not set for reward replicas; SGLang
            # has no /sleep: the run stopped at the first one
            raise ValueError(
                f"reward.placement=colocated sleeps the reward replicas between scorings, which rlrm does on its own "
                f"server only, not on reward.server.backend={self.server.backend}: use backend=embedded, or "
                "placement=standalone"
            )
        return self

    @property
    def weights_of_components(self) -> dict[str, float]:
        """The component weights in force: a rubric's criteria's, else reward.component_weights."""
        return self.rubric.weights if self.kind == "rubric" else self.component_weights

    @property
    def samples_verdicts(self) -> bool:
        """Whether this reward's judge draws its verdicts at a temperature above 0 (reward.cache auto skips it)."""
        return self.model_kind == "genrm" and self.kind != "custom" and self.genrm.temperature > 0

    @property
    def model_kind(self) -> str | None:
        """The served model this reward calls, if any (a custom function calls one when reward.server.model is set)."""
        if self.kind in ("disrm", "genrm"):
            return self.kind
        if self.kind == "rubric":
            return "genrm"  # a judge asked once per criterion
        if self.kind == "custom":
            return self.custom.model_role if self.server.model else None
        return self.composite.model_kind if self.kind == "composite" else None
