"""`reward.cache`: judgements kept by content, so the same (prompt, response, reference) under the same reward
contract is paid for once (rlrm/engine/rewards/cache.py; docs/reward-cache.md).

    reward.cache.enabled=true reward.cache.path=~/.cache/rlrm/judge.sqlite
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rlrm.config.section import Section

CACHED_BY_DEFAULT = (
    "disrm",
    "genrm",
    "composite",
    "rubric",
)  # reward kinds that call a model: a hit saves a model call


class RewardCacheConfig(Section):
    """The content-addressed reward cache: key = (reward contract fingerprint, data source, prompt, response,
    reference, extra info)."""

    enabled: Literal["auto"] | bool = Field(
        "auto",
        description="auto: on for rewards that call a model (disrm, genrm, composite, rubric, served or hosted), off for the "
        "rule and custom functions (cheap, or free to depend on more than the sample's text) and for a judge that "
        "samples (reward.genrm.temperature > 0: each call is a fresh draw); true or false to force.",
    )
    path: str | None = Field(
        None,
        description="SQLite file that keeps judgements across runs and processes (WAL; values stored as JSON, never "
        "pickled). None: in memory for this run only. A file that is not an rlrm reward cache is refused.",
    )
    max_entries: int = Field(
        100_000,
        gt=0,
        description="Most judgements kept (in memory, and in the file); the least recently used go first.",
    )

    @field_validator("enabled", mode="before")
    @classmethod
    def _words(cls, value: object) -> object:
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        return value

    @field_validator("path")
    @classmethod
    def _expand(cls, value: str | None) -> str | None:
        from pathlib import Path

        return None if value is None else str(Path(value).expanduser())

    def active(self, kind: str, sampled: bool = False) -> bool:
        """Whether a reward of `kind` (reward.kind) is cached; `sampled`: its judge draws verdicts at a temperature
        above 0, so a kept verdict would stand in for a new draw (auto leaves such a judge uncached)."""
        if self.enabled != "auto":
            return bool(self.enabled)
        return kind in CACHED_BY_DEFAULT and not sampled
