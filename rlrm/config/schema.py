"""The profile schema: one pydantic model per concern, composed into `Profile`.

A profile is plain data. YAML files in `profiles/` are validated against these models
(unknown keys are errors), and the resolved profile is saved with every run as `config.yaml`.
This module imports nothing heavy so that `rlrm --help` stays fast.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

from pydantic import Field, field_validator, model_validator

from rlrm.config.agent import AgentConfig
from rlrm.config.ray_address import check_one_ray, check_ray_address
from rlrm.config.reward import RewardConfig
from rlrm.config.section import Section
from rlrm.config.servers import RolloutServerConfig
from rlrm.float32 import fits_float32

PROMPT_SUFFIX = 'Let\'s think step by step and output the final answer after "####".'
MATH_PROMPT_SUFFIX = (
    "Let's think step by step and output the final answer within \\boxed{}."  # verl's MATH preprocessing
)
# Every step generates, scores and holds train_batch_size x n completions in memory: a typo such as
# `rollout.n=1e9` must fail at validation, not as an out-of-memory kill minutes later.
MAX_GROUP_SIZE = 1024
MAX_SAMPLES_PER_STEP = 1_000_000


class SyntheticConfig(Section):
    """Knobs of the synthetic arithmetic word-problem generator."""

    num_train: int = Field(4096, gt=0, description="Problems in the train split.")
    num_test: int = Field(256, gt=0, description="Problems in the test split (disjoint from train).")
    min_value: int = Field(1, ge=0, description="Smallest operand.")
    max_value: int = Field(20, gt=0, description="Largest operand.")
    num_operands: int = Field(2, ge=2, le=4, description="Numbers combined per problem.")
    ops: list[Literal["+", "-", "*"]] = Field(["+", "-"], min_length=1, description="Operators used.")
    allow_negative: bool = Field(False, description="Allow answers below zero.")
    seed: int = Field(
        1234, ge=0, lt=2**63, description="Seed of the generator (independent of the trainer's seed; below 2**63)."
    )

    @model_validator(mode="after")
    def _check_range(self) -> "SyntheticConfig":
        if self.min_value > self.max_value:
            raise ValueError(f"min_value ({self.min_value}) must be <= max_value ({self.max_value})")
        return self


class DataConfig(Section):
    """Where prompts come from and how they become token ids."""

    source: Literal["synthetic", "gsm8k", "math"] = Field(
        "synthetic",
        description=(
            "Dataset kind: synthetic arithmetic, GSM8K (numeric ground truths), or MATH-style problems with text "
            "ground truths such as \\frac{1}{2} (needs reward.rule=math and a data.path)."
        ),
    )
    path: str = Field(
        "openai/gsm8k",
        description=(
            "gsm8k and math: hub id or local .jsonl/.json/.parquet file or folder (rows of the dataset's own shape "
            "or verl's parquet; math: `problem` with `answer` or a `solution` holding \\boxed{...})."
        ),
    )
    train_split: str = Field("train", description="Split (hub) or file used for training.")
    test_split: str = Field("test", description="Split (hub) or file used for validation.")
    synthetic: SyntheticConfig = Field(default_factory=SyntheticConfig)
    prompt_suffix: str = Field(
        PROMPT_SUFFIX,
        description="Instruction appended to each question (not to verl parquet's messages). Unset with "
        'reward.rule=math: "Let\'s think step by step and output the final answer within \\boxed{}."',
    )
    train_batch_size: int = Field(32, gt=0, description="Prompts per step (each sampled rollout.n times).")
    val_size: int = Field(128, ge=0, description="Test prompts scored at each validation (0: all).")
    max_prompt_length: int = Field(256, gt=0, description="Longest prompt in tokens.")
    prompt_too_long: Literal["error", "truncate-left", "drop"] = Field(
        "error", description="What to do with a longer prompt: stop, keep its last tokens, or skip it (counted)."
    )
    skip_bad_rows: bool = Field(False, description="Skip rows without a question or ground truth (counted).")
    shuffle: bool = Field(True, description="Reshuffle the train split each epoch (seeded).")


class ModelConfig(Section):
    """The policy checkpoint. `tiny:NAME` names a model that `rlrm models prepare` builds."""

    path: str = Field("tiny:policy", description="HF folder, hub id, or tiny:NAME.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Compute dtype of the policy (forward and backward in training, and generation)."
    )
    precision: Literal["mixed", "pure"] = Field(
        "mixed",
        description=(
            "How a dtype other than float32 trains. mixed: float32 master weights and optimizer state, forward and "
            "backward in model.dtype (torch.autocast in the trainer process, FSDP2 MixedPrecisionPolicy on ranks), "
            "the rollout engine's copy in model.dtype; pure: weights, gradients and AdamW state in model.dtype "
            "(half the memory, and updates smaller than a model.dtype ulp are lost). float16 trains mixed, in the "
            "trainer process, with a dynamic loss scale (actor/loss_scale). Actor ranks on the CPU (gloo) train in "
            "float32 whatever the two say (bf16 products are slower there than float32's)."
        ),
    )
    tf32: bool = Field(
        False,
        description=(
            "On CUDA, float32 matrix products run in TF32 on the tensor cores (torch.backends.cuda.matmul."
            "fp32_precision='tf32', as HF's TrainingArguments(tf32=True)): several times faster at model.dtype float32 "
            "(about 7x the rate on an H100 or H200), inputs rounded to 10 mantissa bits. In the trainer process while "
            "the run trains (the actor, the in-process rollout engine, the reference) and on actor ranks; rlrm's embedded "
            "servers take it as --tf32 in their extra_args (actor.recompute_old_log_prob auto counts TF32 as a "
            "precision of its own). false leaves the process's setting (torch's default: "
            "off). No effect on the CPU."
        ),
    )
    ref_path: str | None = Field(None, description="Reference model (default: same as path).")


class RolloutConfig(Section):
    """Generation: backend, sampling and batching."""

    backend: Literal["hf", "server"] = Field(
        "hf",
        description="Rollout engine: hf (transformers in the trainer process, CPU or GPU) or server (the policy served by "
        "rollout.server replicas over SGLang's /generate, new weights loaded into them after every update).",
    )
    n: int = Field(8, gt=0, description=f"Samples per prompt (the GRPO group size, at most {MAX_GROUP_SIZE}).")
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature (0: greedy).")
    top_p: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="Nucleus sampling mass (on vLLM rollout servers, 1 where their log-probs are trained on as they "
        "come: off-policy modes, recompute_old_log_prob never; vLLM takes them after filtering).",
    )
    top_k: int = Field(
        -1,
        ge=-1,
        description="Top-k sampling, tokens tied with the k-th kept as HF and vLLM keep them (-1 or 0: off; on vLLM "
        "rollout servers, as top_p says).",
    )
    max_new_tokens: int = Field(20, gt=0, description="Longest response in tokens.")
    val_temperature: float = Field(0.0, ge=0.0, description="Temperature at validation (0: greedy).")
    max_batch_size: int = Field(64, gt=0, description="Most requests the hf engine runs in one batch.")
    batch_wait_ms: float = Field(2.0, ge=0.0, description="How long the hf engine waits to fill a batch.")
    compile: Literal["off", "cudagraphs", "inductor"] = Field(
        "off",
        description="The hf engine's decoding: off (eager, a KV cache that grows), or a static KV cache and a "
        "captured or compiled decode step: cudagraphs (CUDA only: each step replayed as one CUDA graph, captured the "
        "first time a batch shape is met) or inductor (torch.compile: fused kernels, with CUDA graphs on a GPU; a minute or more to "
        "compile per shape). Same tokens up to float rounding. For GPUs, where a small model's eager step waits on "
        "kernel launches.",
    )
    server: RolloutServerConfig = Field(default_factory=RolloutServerConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)

    @field_validator("n")
    @classmethod
    def _bounded_group(cls, value: int) -> int:
        if value > MAX_GROUP_SIZE:
            raise ValueError(
                f"at most {MAX_GROUP_SIZE} samples per prompt: every step generates and holds "
                "data.train_batch_size x rollout.n completions in memory"
            )
        return value

    @model_validator(mode="after")
    def _compile_is_the_hf_engines(self) -> RolloutConfig:
        if self.compile != "off" and self.backend != "hf":
            raise ValueError(
                f"rollout.compile={self.compile} compiles the in-process hf engine's decoding, and rollout.backend is "
                f"{self.backend} (its replicas decode on their own engine): set rollout.compile=off"
            )
        return self


class ActorConfig(Section):
    """Policy optimisation: PPO-clip loss, optimizer, batching."""

    lr: float = Field(
        1e-4, gt=0.0, le=1.0, description="AdamW learning rate (at most 1; a larger one overflows float32)."
    )
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas (each 0 <= beta < 1).")
    warmup_steps: int = Field(0, ge=0, description="Linear warmup steps of the learning rate.")
    grad_clip: float = Field(1.0, gt=0.0, description="Max global grad norm.")
    ppo_epochs: int = Field(1, gt=0, description="Passes over each step's batch.")
    mini_batch_size: int = Field(32, gt=0, description="Prompts per optimizer step (times rollout.n samples).")
    micro_batch_size: int = Field(64, gt=0, description="Samples per forward/backward (gradient accumulation).")
    logits_chunk_tokens: int = Field(
        1024,
        ge=0,
        description=(
            "Run the LM head on this many response positions at a time in a micro-batch of more response positions "
            "than that whose float32 logits would exceed 256 MiB (a 152k-token vocabulary reaches it at 442 "
            "positions), each chunk's logits made again in the "
            "backward pass instead of kept: one more LM-head forward per chunk, and the largest activations of a "
            "step gone. 0: whole. For Llama, Qwen2/3 and Mistral models, in the trainer process and on FSDP2 ranks."
        ),
    )
    disable_dropout: bool = Field(
        True,
        description=(
            "Dropout off in the policy during the update (TRL's disable_dropout), as in the old log-probs and "
            "generation: with a model whose config has dropout, an on-policy step's ratio would otherwise not be 1. "
            "false: the update keeps the model's dropout."
        ),
    )
    clip_ratio_low: float = Field(0.2, ge=0.0, description="PPO clip range below 1.")
    clip_ratio_high: float = Field(0.2, ge=0.0, description="PPO clip range above 1.")
    clip_ratio_c: float = Field(3.0, gt=1.0, description="Dual-clip bound for negative advantages.")
    loss_agg_mode: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = (
        Field("token-mean", description="How token losses become one number.")
    )
    loss_scale_factor: int | None = Field(
        None,
        ge=1,
        description=(
            "seq-mean-token-sum-norm's divisor (Dr.GRPO; verl's actor.loss_scale_factor), the same every step. "
            "Default: rollout.max_new_tokens, the width verl pads responses to."
        ),
    )
    use_kl_loss: bool = Field(False, description="Add a KL penalty to a frozen reference model.")
    kl_loss_coef: float = Field(0.001, ge=0.0, description="Weight of the KL loss.")
    kl_loss_type: str = Field("low_var_kl", description="k1|kl, abs, k2|mse, k3|low_var_kl; '+' suffix: k2 gradient.")
    entropy_coeff: float = Field(0.0, ge=0.0, description="Entropy bonus weight.")
    recompute_old_log_prob: Literal["auto", "always", "never"] = Field(
        "auto",
        description=(
            "Old log-probs of on-policy batches: always recompute them with the actor, never (use the rollout "
            "engine's), or auto: recompute only when ppo_epochs > 1 or the engine may score differently (vLLM or "
            "SGLang servers, another dtype; rlrm's embedded servers run the in-process code). Off-policy batches "
            "always use the engine's. true/false mean always/never."
        ),
    )
    max_nonfinite_steps: int = Field(3, gt=0, description="Stop after this many non-finite losses in a row.")
    world_size: int = Field(
        1,
        ge=1,
        description=(
            "Training ranks: 1 trains in the trainer process; N > 1 starts N rank processes (torch.distributed: gloo "
            "on CPU, nccl on GPU, one GPU per rank) holding the policy (and reference) sharded with FSDP2 per decoder "
            "layer, each training its share of every mini-batch, with the loss normalised over the whole mini-batch "
            "(N ranks update the weights as one does)."
        ),
    )
    strategy: Literal["auto", "fsdp2"] = Field(
        "auto",
        description=(
            "auto: train in the trainer process at world_size 1, on FSDP2 ranks above; fsdp2: FSDP2 ranks at any "
            "world size (at 1, one rank process: nccl on its GPU, as verl's actor.strategy=fsdp2 runs on one GPU)."
        ),
    )
    ranks_on: Literal["local", "ray"] = Field(
        "local",
        description=(
            "Where the ranks run when world_size > 1: local (torch.multiprocessing spawn on this machine) or ray "
            "(Ray actors in a placement group on the cluster at actor.ray_address, or a local Ray)."
        ),
    )
    placement: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        "PACK",
        description=(
            "Ray placement-group strategy of the ranks (ranks_on=ray): PACK (as few nodes as possible), SPREAD "
            "(across nodes), STRICT_PACK (all on one node), STRICT_SPREAD (one rank per node)."
        ),
    )
    ray_address: str | None = Field(
        None,
        description=(
            "Ray cluster the ranks join (ranks_on=ray; None: reward.ray_address, else the Ray this run already "
            "joined, else RAY_ADDRESS as `ray job submit` sets it, else a new local Ray). One run joins one Ray: "
            "set, the reward workers and servers join it too (set both, they must be the same)."
        ),
    )
    collective_timeout_s: float = Field(
        120.0,
        gt=0.0,
        description=(
            "Rank start-up and collective timeout: a rank that dies stops the run within about this long (usually "
            "at once: its process exit is seen by the trainer)."
        ),
    )

    @field_validator("ray_address")
    @classmethod
    def _ray_address(cls, value: str | None) -> str | None:
        return check_ray_address(value)

    @field_validator("recompute_old_log_prob", mode="before")
    @classmethod
    def _recompute_from_bool(cls, value: object) -> object:
        # The setting was a bool before auto existed: saved run folders still say true/false.
        return {True: "always", False: "never"}.get(value, value) if isinstance(value, bool) else value

    @model_validator(mode="after")
    def _check_kl_type(self) -> "ActorConfig":
        kinds = {"k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl"}
        if self.kl_loss_type.removesuffix("+") not in kinds:
            raise ValueError(f"kl_loss_type {self.kl_loss_type!r} is not one of {sorted(kinds)} (optionally with '+')")
        return self

    @field_validator("betas")
    @classmethod
    def _betas_below_one(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= beta < 1.0 for beta in value):  # AdamW refuses them only once the run has started
            raise ValueError(f"each must be at least 0 and below 1 (AdamW's are [0.9, 0.999]), got {list(value)}")
        return value

    @property
    def on_ranks(self) -> bool:
        """Whether the actor trains on FSDP2 rank processes (else in the trainer process)."""
        return self.world_size > 1 or self.strategy == "fsdp2"


class AlgorithmConfig(Section):
    """Advantage estimation."""

    adv_estimator: Literal["grpo"] = Field("grpo", description="Advantage estimator.")
    norm_adv_by_std: bool = Field(True, description="Divide by the group std (False: Dr.GRPO).")
    adv_eps: float = Field(1e-6, gt=0.0, description="Added to the std before dividing.")
    component_norm: Literal["none", "gdpo"] = Field(
        "none",
        description="none: GRPO on each sample's score. gdpo: each reward component (reward.component_weights) "
        "normalised within its group, summed with its weight, then whitened over the batch's tokens, as verl's "
        "gdpo advantage estimator (rlrm/engine/gdpo.py).",
    )


# The scheduling modes: the one list of their names (the scheduler registry, bench and report read it).
Mode = Literal["sync", "stream", "pipeline", "one-step-off", "fully-async"]
MODES: tuple[str, ...] = get_args(Mode)


class TrainerConfig(Section):
    """The training loop."""

    mode: Mode = Field(
        "sync",
        description=(
            "Scheduling mode: sync (generate, then score, then train), stream (score each sample as it is generated), "
            "pipeline (stream + mini-batch updates as soon as their groups are scored), one-step-off (generation of "
            "step k+1 overlaps scoring and training of step k), fully-async (rollouter and trainer decoupled, "
            "bounded by max_staleness)."
        ),
    )
    max_staleness: int = Field(
        2, ge=0, description="fully-async: the most policy versions a trained sample may lag behind the trainer."
    )
    total_steps: int = Field(30, gt=0, description="GRPO steps to run.")
    seed: int = Field(
        0, ge=0, lt=2**63, description="Seed of sampling, shuffling and initialisation (0 <= seed < 2**63)."
    )
    val_every: int = Field(10, ge=0, description="Validate every k steps (0: never).")
    val_before_train: bool = Field(True, description="Validate once before the first step.")
    save_every: int = Field(10, ge=0, description="Checkpoint every k steps (0: only at the end).")
    keep_checkpoints: int = Field(2, gt=0, description="Checkpoints kept on disk.")
    out_dir: str = Field("runs", description="Parent folder of run folders.")
    run_name: str | None = Field(None, description="Run folder name (default: profile name + time).")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Where the policy runs.")
    num_threads: int = Field(0, ge=0, description="torch CPU threads (0: torch's default).")


class LoggingConfig(Section):
    """What a run prints and writes."""

    console: Literal["rich", "plain", "none"] = Field("rich", description="Live display style.")
    save_samples: bool = Field(False, description="Write prompts, responses and scores to samples.jsonl.")
    trace_detail_steps: int = Field(
        100,
        ge=0,
        description="Steps whose every request, reward call and mini-batch go to trace.json (later: phases only).",
    )
    trackers: list[Literal["tensorboard", "wandb", "mlflow"]] = Field(
        default_factory=list,
        description="Also send every metrics row (same names) and the resolved profile to these trackers; metrics.jsonl "
        "is always written. Each is an optional extra (pip install 'rlrm[tensorboard]', 'rlrm[wandb]', 'rlrm[mlflow]').",
    )
    tracker_dir: str | None = Field(
        None,
        description="Where the trackers write (tensorboard/<run id>/, wandb/, mlruns/ under it, shared by runs); unset: "
        "the run folder. MLflow uses a local file store there, so no tracking server or network is needed.",
    )
    project: str = Field("rlrm", min_length=1, description="The wandb project and the MLflow experiment name.")
    wandb_mode: Literal["offline", "online"] = Field(
        "offline",
        description="offline: wandb writes its run under tracker_dir and never reaches the network (upload later with "
        "`wandb sync`); online: streams to wandb, which reads its key from WANDB_API_KEY or `wandb login` (never from a "
        "profile).",
    )

    @field_validator("tracker_dir")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        from pathlib import Path

        # absolute, so that a run resumed from another folder keeps writing to the same place
        return None if value is None else str(Path(value).expanduser().resolve())

    @field_validator("trackers", mode="before")
    @classmethod
    def _one_tracker(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value  # `--set logging.trackers=tensorboard`

    @field_validator("trackers")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))


class Profile(Section):
    """A complete training setup."""

    description: str = Field("", description="One line saying what this profile is for.")
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    actor: ActorConfig = Field(default_factory=ActorConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)

    @model_validator(mode="after")
    def _check_one_ray(self) -> "Profile":
        check_one_ray(self.actor.ray_address, self.reward.ray_address)
        return self

    @model_validator(mode="after")
    def _check_answers(self) -> "Profile":
        data, reward = self.data, self.reward
        if data.source == "math" and reward.rule != "math":
            raise ValueError(
                "data.source=math holds text ground truths (such as \\frac{1}{2}) that reward.rule=gsm8k (a number "
                "after ####) can never match; set reward.rule=math"
            )
        if data.source == "math" and "path" not in data.model_fields_set:
            raise ValueError(
                "data.source=math needs data.path: a local file or folder of MATH rows (problem with answer or "
                "solution) or verl parquet, or a hub id such as DigitalLearningGmbH/MATH-lighteval"
            )
        if reward.rule == "math" and "prompt_suffix" not in data.model_fields_set:
            data.prompt_suffix = MATH_PROMPT_SUFFIX  # the instruction the rule reads: the answer in \boxed{}
        # a saved profile (config.yaml, `profiles show`) holds the other rule's instruction, and the rule is what
        # trains: every reward 0 (a model reward or a function of the user's reads what it reads: said at start)
        asks = unread_instruction(self)
        if asks is not None and reward.kind in ("rule", "composite"):
            wanted = MATH_PROMPT_SUFFIX if reward.rule == "math" else PROMPT_SUFFIX
            raise ValueError(
                f"data.prompt_suffix asks for the answer as reward.rule={asks} reads it, but reward.rule={reward.rule}: "
                f"no answer would be read; remove data.prompt_suffix from the profile, or set it to an instruction "
                f"for the {reward.rule} rule ({wanted!r})"
            )
        return self

    @model_validator(mode="after")
    def _check_batches(self) -> "Profile":
        per_step = self.data.train_batch_size * self.rollout.n
        if per_step > MAX_SAMPLES_PER_STEP:
            raise ValueError(
                f"data.train_batch_size x rollout.n = {per_step:,} completions per step, over {MAX_SAMPLES_PER_STEP:,}: "
                "every step generates and holds them all in memory"
            )
        if self.data.train_batch_size % self.actor.mini_batch_size:
            raise ValueError(
                f"data.train_batch_size ({self.data.train_batch_size}) must be a multiple of "
                f"actor.mini_batch_size ({self.actor.mini_batch_size})"
            )
        if self.algorithm.component_norm == "gdpo":
            _check_gdpo(self.reward)
        _check_reward_for_training(self.reward)
        if self.model.dtype == "float16" and (self.model.precision == "pure" or self.actor.on_ranks):
            where = "model.precision=pure" if self.model.precision == "pure" else "actor ranks (FSDP2)"
            raise ValueError(
                f"model.dtype=float16 with {where}: float16 trains only with float32 master weights and a loss "
                "scale, which rlrm keeps in the trainer process (model.precision=mixed, no actor ranks); "
                "use model.dtype=bfloat16 there"
            )
        buffer_len = self.reward.overlong.buffer_len
        if buffer_len is not None and buffer_len >= self.rollout.max_new_tokens:
            raise ValueError(
                f"reward.overlong.buffer_len ({buffer_len}) must be below rollout.max_new_tokens "
                f"({self.rollout.max_new_tokens}): the penalty starts buffer_len tokens before the longest response"
            )
        _check_vllm_behaviour_log_probs(self)
        if self.reward.placement == "colocated" and self.trainer.mode != "sync":
            raise ValueError(
                f"reward.placement=colocated takes turns with the policy on one device, so it needs trainer.mode=sync "
                f"(got {self.trainer.mode}); use reward.placement=standalone to overlap rewards with generation"
            )
        return self


def unread_instruction(profile: "Profile") -> str | None:
    """The rule (gsm8k or math) whose answer format `data.prompt_suffix` asks for, where reward.rule cannot read
    that format; else None. gsm8k's flexible method reads the last number, a boxed one too."""
    asks = {PROMPT_SUFFIX: "gsm8k", MATH_PROMPT_SUFFIX: "math"}.get(profile.data.prompt_suffix)
    rule = profile.reward.rule
    if asks is None or asks == rule or (rule == "gsm8k" and profile.reward.method != "strict"):
        return None
    return asks


def _check_vllm_behaviour_log_probs(p: "Profile") -> None:
    """vLLM reports log-probs after top-p/top-k filtering (renormalised over the tokens kept: up to 0.4 nats above
    the actor's at top_p 0.5 on the tiny policy), the actor and the embedded server before it. Where they are
    trained on as they come, every PPO ratio would be off: refused there."""
    r = p.rollout
    if r.backend != "server" or r.server.backend != "vllm" or (r.top_p == 1.0 and r.top_k <= 0):
        return
    off_policy = p.trainer.mode in ("one-step-off", "fully-async")
    if not off_policy and p.actor.recompute_old_log_prob != "never":
        return  # recomputed by the actor: vLLM's serve only rollout/log_prob_diff_*
    where = f"trainer.mode={p.trainer.mode}" if off_policy else "actor.recompute_old_log_prob=never"
    fixes = "set rollout.top_p=1 and rollout.top_k=-1, or use rollout.server.backend=embedded"
    if not off_policy:
        fixes += ", or actor.recompute_old_log_prob=auto"
    raise ValueError(
        f"rollout.top_p={r.top_p:g}, rollout.top_k={r.top_k} on vLLM rollout servers with {where}: vLLM's log-probs "
        f"come after top-p/top-k filtering, the actor's before, and would be trained on as they come; {fixes}"
    )


def _check_reward_for_training(reward: RewardConfig) -> None:
    """Reward settings whose scores training cannot use (the parity and inspect commands set their own)."""
    if not fits_float32(reward.default_score):
        raise ValueError(
            f"reward.default_score={reward.default_score} is no score training can use (a failed sample's NaN or inf "
            "spreads over its group's advantages); give a finite number"
        )
    comp = reward.composite
    if reward.kind == "composite" and comp.mode == "gate":
        if comp.model_kind == "disrm":  # logits are unbounded below: a right answer could score under a wrong one
            raise ValueError(
                "reward.composite.mode=gate with model_kind=disrm: a DisRM's score of a right answer can fall below "
                "the rule's score of a wrong one; use mode=weighted, or model_kind=genrm (verdicts in [0, 1])"
            )
        if reward.format_score > 0:  # a verdict of 0 on a right answer scores under a wrong answer's format score
            raise ValueError(
                f"reward.composite.mode=gate with reward.format_score={reward.format_score}: a right answer the judge "
                "scores 0 would get less than a wrong one; set format_score=0 or use mode=weighted"
            )


def _check_gdpo(reward: RewardConfig) -> None:
    """GDPO needs components: a rubric's criteria, a custom function's, or the rule's when named in reward.component_weights."""
    if reward.kind not in ("custom", "rule", "rubric"):
        raise ValueError(
            f"algorithm.component_norm=gdpo needs reward components, and reward.kind={reward.kind} returns one score; "
            "use reward.kind=rubric (one component per criterion), custom (a function returning 'reward_components') "
            "or rule, or component_norm=none"
        )
    if not math.isfinite(reward.default_score):
        raise ValueError(
            f"algorithm.component_norm=gdpo: reward.default_score={reward.default_score} would be every component of "
            "a failed sample; give a finite reward.default_score"
        )
    if reward.overlong.buffer_len is not None:  # GDPO reads the components, the penalty is on the score alone
        raise ValueError(
            "algorithm.component_norm=gdpo with reward.overlong.buffer_len: GDPO's advantages come from the reward "
            "components, and the overlong penalty lowers only the score, so it would change nothing; drop one of them"
        )
    if reward.kind == "rule" and not reward.component_weights:
        raise ValueError(
            "algorithm.component_norm=gdpo with reward.kind=rule needs reward.component_weights naming the rule's "
            "components, e.g. reward.component_weights={correct: 1.0, format: 0.2}"
        )
