"""From command-line options to a checked ParityConfig and the samples to score.

    opts = ParityOptions.of(arguments)        # the `rlrm parity disrm` command's arguments, by name
    profile = load_parity_profile(opts)
    cfg = build_config(opts, profile)         # the reward model is checked here, before anything starts
    samples = build_samples(opts, profile)    # the profile's policy on its dataset, or --input

Each option is declared once, with its flag, default and help, in the command's signature
(`rlrm/cli/parity.py`); this record carries them by the same names, and the choices an option
accepts are the `Literal`s of `rlrm.parity.config`. Every problem is an RlrmError with one clear line.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from rlrm.config.loader import load_profile
from rlrm.config.schema import Profile
from rlrm.engine.executor.world_size import check_world_size
from rlrm.engine.models.tiny import resolve_model_path
from rlrm.engine.rewards.fsdp_disrm.config import resolve_device
from rlrm.errors import ConfigError, ModelError
from rlrm.parity.compare import (
    DEFAULT_ATOL,
    DEFAULT_MAX_OUTSIDE_FRAC,
    DEFAULT_MAX_RANK_FLIPS,
    DEFAULT_MIN_GROUP_PEARSON,
    DEFAULT_MIN_SPEARMAN,
    DEFAULT_RTOL,
    Tolerances,
)
from rlrm.parity.config import ALL_LEGACY_DTYPES, ALL_LOOP_DTYPES, DEVICES, TRUNCATIONS, ParityConfig
from rlrm.parity.inputs import generate_samples, read_samples

DEFAULT_PROFILE = "tiny-disrm"


@dataclass(frozen=True, kw_only=True)
class ParityOptions:
    """What `rlrm parity disrm` was asked (see its --help for each option)."""

    profile: str | None
    overrides: list[str]
    model: str | None
    input: Path | None
    samples: int
    n: int | None
    seed: int
    legacy_dtype: str
    loop_dtype: str
    matrix: bool
    world_size: int
    micro_batch_size: int
    max_tokens_per_batch: int | None
    rmpad: bool
    max_length: int | None
    truncation: str
    template: Path | None
    device: str
    threads: int
    addresses: list[str]
    atol: float | None  # None: the default tolerances (rlrm.parity.compare)
    rtol: float | None
    max_outside_frac: float | None
    min_spearman: float | None
    max_rank_flips: int | None
    min_group_pearson: float | None
    score_offset: int
    invariance: bool = True

    @classmethod
    def of(cls, arguments: dict) -> ParityOptions:
        """The options among a command's `arguments` (name -> value; other names are left out)."""
        return cls(**{f.name: arguments[f.name] for f in fields(cls)})


def load_parity_profile(opts: ParityOptions):
    """The profile, when one is needed (to generate samples or to name the reward model) or named."""
    if opts.profile is None and opts.input is not None and opts.model is not None:
        if opts.overrides:
            raise ConfigError("--set changes a profile: name one with --profile")
        return Profile()
    return load_profile(opts.profile or DEFAULT_PROFILE, opts.overrides)


def build_config(opts: ParityOptions, profile) -> ParityConfig:
    """Check every option and the reward model; nothing is started here."""
    _check_choice("--legacy-dtype", opts.legacy_dtype, ALL_LEGACY_DTYPES)
    _check_choice("--loop-dtype", opts.loop_dtype, ALL_LOOP_DTYPES)
    _check_choice("--legacy-truncation", opts.truncation, TRUNCATIONS)
    _check_choice("--device", opts.device, ("auto", *DEVICES))
    if opts.matrix and opts.addresses:
        raise ConfigError(
            "--address servers have one dtype each; --matrix needs rlrm to start them (drop one of the two)"
        )
    name = opts.model or profile.reward.server.model
    if not name:
        raise ConfigError("the profile names no reward model (reward.server.model); pass --model PATH")
    model = resolve_model_path(name)
    positions = check_reward_model(model)
    max_length = _max_length(opts.max_length, profile.reward.disrm.max_length, positions)
    device = _device(opts.device)
    check_world_size(opts.world_size, device)
    if opts.max_tokens_per_batch is not None and opts.max_tokens_per_batch < max_length:
        raise ConfigError(
            f"--max-tokens-per-batch {opts.max_tokens_per_batch} is less than --max-length {max_length}: "
            "the longest conversation would not fit a micro-batch"
        )
    return ParityConfig(
        model=model,
        legacy_dtypes=list(ALL_LEGACY_DTYPES) if opts.matrix else [opts.legacy_dtype],
        loop_dtypes=list(ALL_LOOP_DTYPES) if opts.matrix else [opts.loop_dtype],
        world_size=opts.world_size,
        micro_batch_size=opts.micro_batch_size,
        max_tokens_per_batch=opts.max_tokens_per_batch,
        rmpad=opts.rmpad,
        max_length=max_length,
        truncation=opts.truncation,
        template=_read_template(opts.template),
        device=device,
        threads=opts.threads,
        addresses=list(opts.addresses),
        **tolerance_settings(opts),
        adv_eps=profile.algorithm.adv_eps,
        norm_adv_by_std=profile.algorithm.norm_adv_by_std,
        score_offset=opts.score_offset,
        reward=profile.reward,
        invariance=opts.invariance,
    )


def build_samples(opts: ParityOptions, profile) -> list:
    """--input's rows, or `samples` prompts x `n` responses of the profile's policy."""
    if opts.input is not None:
        return read_samples(opts.input)
    return generate_samples(profile, opts.samples, opts.n or profile.rollout.n, opts.seed)


def tolerance_settings(opts) -> dict:
    """The six tolerance options of `opts`, each given or its default (rlrm.parity.compare)."""
    defaults = {
        "atol": DEFAULT_ATOL,
        "rtol": DEFAULT_RTOL,
        "max_outside_frac": DEFAULT_MAX_OUTSIDE_FRAC,
        "min_spearman": DEFAULT_MIN_SPEARMAN,
        "max_rank_flips": DEFAULT_MAX_RANK_FLIPS,
        "min_group_pearson": DEFAULT_MIN_GROUP_PEARSON,
    }
    settings: dict[str, Any] = {
        k: default if getattr(opts, k) is None else getattr(opts, k) for k, default in defaults.items()
    }
    Tolerances(**settings)  # ConfigError naming the option of one no verdict can use (NaN, inf, beyond -1..1)
    return settings


def check_reward_model(path: str) -> int:
    """Refuse a checkpoint that is not a one-score sequence classifier; return its position count.

    Reads the config only (cheap for any model size); the legacy ranks check the loaded head again.
    """
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"cannot read the reward model config of {path!r}: {str(exc).strip().splitlines()[0]}"
        ) from None
    archs = list(getattr(config, "architectures", None) or [])
    if archs and not any(a.endswith("ForSequenceClassification") for a in archs):
        raise ModelError(
            f"{path} is a {archs[0]}, not a sequence classifier: a DisRM needs a classification head "
            "(a *ForSequenceClassification checkpoint with num_labels=1)"
        )
    if config.num_labels != 1:
        raise ModelError(f"{path} has num_labels={config.num_labels}; a DisRM must output one score (num_labels=1)")
    return int(getattr(config, "max_position_embeddings", 0) or 0)


def _max_length(asked: int | None, profile_value: int, positions: int) -> int:
    if asked is None:
        return min(profile_value, positions) if positions else profile_value
    if asked < 1:
        raise ConfigError(f"--max-length must be >= 1, got {asked}")
    if positions and asked > positions:
        raise ConfigError(f"--max-length {asked} is more than the reward model's {positions} positions")
    return asked


def _device(name: str) -> str:
    return resolve_device(name, "--device cuda but no CUDA device is visible; use --device cpu")


def _read_template(path: Path | None) -> str | None:
    if path is None:
        return None
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--template {path}: no such file (give a file holding a Jinja chat template)")
    text = path.read_text(encoding="utf-8")
    if "{{" not in text and "{%" not in text:
        raise ConfigError(f"--template {path} holds no Jinja ({{{{ ... }}}} or {{% ... %}}): not a chat template")
    return text


def _check_choice(flag: str, value: str, choices) -> None:
    if value not in choices:
        raise ConfigError(f"{flag} {value!r}: use one of {', '.join(choices)}")
