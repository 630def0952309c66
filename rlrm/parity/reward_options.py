"""From `rlrm parity reward`'s options to its two sides and the samples both score.

    opts = RewardParityOptions.of(arguments)       # the command's arguments, by name
    profile, a, b = load_sides(opts)               # side A: the profile's reward; B: with --b-set, or --b-profile's
    samples = build_reward_samples(opts, profile)  # --input's rows, or the profile's policy on its data

Each option is declared once, with its flag, default and help, in the command's signature (`rlrm/cli/parity.py`).
Every problem is an RlrmError with one clear line, raised before any server starts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from rlrm.config.loader import load_profile
from rlrm.errors import ConfigError
from rlrm.parity.compare import Tolerances
from rlrm.parity.inputs import ParitySample, generate_samples, read_samples
from rlrm.parity.options import tolerance_settings
from rlrm.parity.reward_sides import RewardSide

DEFAULT_PROFILE = "tiny-genrm"


@dataclass(frozen=True, kw_only=True)
class RewardParityOptions:
    """What `rlrm parity reward` was asked (see its --help for each option)."""

    profile: str | None
    overrides: list[str]  # --set: the profile (both sides, unless --b-profile names side B's)
    b_profile: str | None
    b_sets: list[str]  # --b-set: side B's reward only
    input: Path | None
    samples: int
    n: int | None
    seed: int
    atol: float | None  # None: the default tolerances (rlrm.parity.compare)
    rtol: float | None
    max_outside_frac: float | None
    min_spearman: float | None
    max_rank_flips: int | None
    min_group_pearson: float | None
    max_failed_frac: float

    @classmethod
    def of(cls, arguments: dict) -> RewardParityOptions:
        """The options among a command's `arguments` (name -> value; other names are left out)."""
        return cls(**{f.name: arguments[f.name] for f in fields(cls)})

    def tolerances(self) -> Tolerances:
        return Tolerances(**tolerance_settings(self))


def load_sides(opts: RewardParityOptions):
    """(profile, side A, side B). Side B is --b-profile's reward (or the profile's again) with --b-set on top."""
    name = opts.profile or DEFAULT_PROFILE
    profile = load_profile(name, opts.overrides)
    b_sets = [_reward_setting(s) for s in opts.b_sets]
    b_name = opts.b_profile or name
    try:
        b_profile = load_profile(b_name, b_sets if opts.b_profile else [*opts.overrides, *b_sets])
    except ConfigError as exc:
        raise ConfigError(f"side B ({_origin(b_name, [], '--b-set', b_sets)}): {exc}") from None
    a = RewardSide("A", _origin(name, opts.overrides, "--set"), profile.reward, *_run_settings(profile))
    b_origin = _origin(b_name, [] if opts.b_profile else opts.overrides, "--set", b_sets)
    b = RewardSide("B", b_origin, b_profile.reward, *_run_settings(b_profile))
    return profile, a, b


def build_reward_samples(opts: RewardParityOptions, profile) -> list[ParitySample]:
    """--input's rows, or `samples` prompts x `n` responses of the profile's policy (their reference answers
    taken from the profile's data)."""
    if opts.input is not None:
        return read_samples(opts.input)
    return generate_samples(profile, opts.samples, opts.n or profile.rollout.n, opts.seed)


def _reward_setting(setting: str) -> str:
    """A --b-set KEY=VALUE, refused in one line unless KEY is a reward.* key (the samples are both sides')."""
    key, eq, _ = setting.partition("=")
    if not eq or not key.strip():
        raise ConfigError(f"--b-set {setting!r}: give KEY=VALUE, e.g. --b-set reward.genrm.temperature=0.7")
    if not key.strip().startswith("reward."):
        raise ConfigError(
            f"--b-set {key.strip()}: side B differs from side A in its reward only; give a reward.* key "
            "(both sides score the same samples)"
        )
    return setting


def _origin(profile: str, sets: list[str], flag: str, b_sets: tuple[str, ...] | list[str] = ()) -> str:
    """`tiny-genrm with --set k, --b-set reward.genrm.template`: keys only (a value may be long, or private)."""
    shown = [f"{flag} {s.partition('=')[0]}" for s in sets] + [f"--b-set {s.partition('=')[0]}" for s in b_sets]
    return profile + (f" with {', '.join(shown)}" if shown else "")


def _run_settings(profile) -> tuple[int, int]:
    """What training passes the reward service besides the section: max_response_len and the seed."""
    return profile.rollout.max_new_tokens, profile.trainer.seed
