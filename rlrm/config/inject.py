"""Injected latency as a config section: one grammar (`rlrm.config.latency`) for reward calls and tool calls.

    reward.inject.latency=uniform:1:40          # every reward call sleeps a draw first (rlrm.engine.rewards.inject)
    rollout.agent.inject.latency=fixed:0.5      # every tool call too (rlrm.engine.agent.tools)

`LatencyInjectConfig` holds the latency, its scale and the seed; `reward.inject` adds failures to it.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from rlrm.config.latency import LatencyDist, parse_latency
from rlrm.config.section import Section


class LatencyInjectConfig(Section):
    """A latency drawn and slept before each call, to measure what scheduling hides (off by default)."""

    latency: str | None = Field(
        None,
        description="Seconds slept before each call: none, fixed:S, uniform:A:B, normal:MU:SIGMA, lognormal:MU:SIGMA, "
        "pareto:SCALE:ALPHA or trace:PATH[:COLUMN] (CSV or JSON of measured latencies).",
    )
    scale: float = Field(1.0, ge=0, allow_inf_nan=False, description="Multiplies every latency drawn (0: none).")
    seed: int = Field(
        0, ge=0, lt=2**63, description="Seed of the draws (each depends on the seed, the sample and its attempt)."
    )

    @field_validator("latency", mode="before")
    @classmethod
    def _latency_text(cls, value: object) -> object:
        # `--set reward.inject.latency=0` arrives as the number 0
        return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value

    @field_validator("latency")
    @classmethod
    def _latency_parses(cls, value: str | None) -> str | None:
        if value is not None:
            parse_latency(value)  # reads the file of a trace spec
        return value

    def latency_dist(self) -> LatencyDist | None:
        """The latency distribution with `scale` applied, or None when it injects none."""
        if self.latency is None:
            return None
        dist = parse_latency(self.latency).scaled(self.scale)
        return None if dist.is_zero else dist
