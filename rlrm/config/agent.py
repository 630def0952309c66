"""`rollout.agent`: multi-turn rollouts with tools (docs/agentic.md); off unless `enabled`."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator, model_validator

from rlrm.config.inject import LatencyInjectConfig
from rlrm.config.section import Section

# A turn is at least one request to the engine and one tool run: more than this many turns in one
# trajectory is a typo (max_turns=1e6), not a plan, and would hold a sample for hours.
MAX_TURNS = 64
# The built-in tools by name (rlrm/engine/agent/tools.py BUILTIN_TOOLS holds the functions; a test keeps both alike).
KNOWN_TOOLS = ("calculator",)


class AgentConfig(Section):
    """Each sample is a trajectory: the policy calls tools as `<call>NAME ARGUMENTS</call>`, reads `<obs>RESULT</obs>`."""

    enabled: bool = Field(False, description="Run rollouts as multi-turn trajectories with tools.")
    max_turns: int = Field(
        4, description=f"Most policy turns per trajectory (1 to {MAX_TURNS}); a last turn ending in a call stops there."
    )
    tools: list[str] = Field(
        ["calculator"], min_length=1, description="Tools the policy may call, by name: built-in or in user_tools."
    )
    call_tag: str = Field("call", description="The policy calls a tool as <TAG>NAME ARGUMENTS</TAG>.")
    observation_tag: str = Field("obs", description="The tool's result is appended as <TAG>RESULT</TAG>.")
    user_tools: dict[str, str] = Field(
        {},
        description="Your tools: NAME -> 'FILE.py:FUNCTION', an `async def FUNCTION(arguments: str) -> str` "
        "(docs/agentic.md); list NAME in tools too.",
    )
    tool_timeout_s: float = Field(10.0, gt=0.0, le=3600.0, description="A tool call running longer is an error.")
    inject: LatencyInjectConfig = Field(
        default_factory=LatencyInjectConfig,
        description="Latency slept before every tool call (the reward.inject.latency grammar); a delay past "
        "tool_timeout_s is a timed-out call.",
    )
    max_observation_chars: int = Field(
        256, gt=0, le=100_000, description="A tool result longer than this is truncated to it (counted)."
    )

    @field_validator("max_turns")
    @classmethod
    def _bounded_turns(cls, value: int) -> int:
        if not 1 <= value <= MAX_TURNS:
            raise ValueError(f"max_turns must be between 1 and {MAX_TURNS} (a turn is one policy segment)")
        return value

    @field_validator("call_tag", "observation_tag")
    @classmethod
    def _plain_tag(cls, value: str) -> str:
        if not (value.isascii() and value.isidentifier()) or len(value) > 16:
            raise ValueError(f"{value!r} must be a short ASCII name (letters, digits, _), written as <{value}>")
        return value

    @field_validator("user_tools")
    @classmethod
    def _tool_files(cls, value: dict[str, str]) -> dict[str, str]:
        out = {}
        for name, spec in value.items():
            if name in KNOWN_TOOLS or not name.isidentifier():
                raise ValueError(f"user tool name {name!r} must be a Python identifier other than a built-in tool")
            path, _, function = spec.rpartition(":")
            if not path.endswith(".py") or not function.isidentifier() or not Path(path).expanduser().is_file():
                raise ValueError(f"user tool {name}: {spec!r} is not 'FILE.py:FUNCTION' with an existing FILE.py")
            out[name] = f"{Path(path).expanduser().resolve()}:{function}"
        return out

    @model_validator(mode="after")
    def _tags_and_tools(self) -> "AgentConfig":
        if self.call_tag == self.observation_tag:
            raise ValueError(f"call_tag and observation_tag are both {self.call_tag!r}; the loop must tell them apart")
        known = [*KNOWN_TOOLS, *self.user_tools]
        unknown = [name for name in self.tools if name not in known]
        if unknown:
            raise ValueError(
                f"unknown tool(s) {', '.join(unknown)}; known tools: {', '.join(known)} "
                "(add yours under rollout.agent.user_tools)"
            )
        return self
