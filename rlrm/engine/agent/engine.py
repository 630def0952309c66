"""A RolloutEngine whose every `generate` is a multi-turn trajectory with tools (`rollout.agent.enabled`).

    engine = AgentEngine(inner_engine, tokenizer, agent_settings(profile))
    traj = await engine.generate(prompt_ids, sampling)   # a Completion with loss_mask and meta["agent"]

Wrapping the engine, not the scheduling modes, makes every mode and every backend (the in-process
hf engine, rollout servers over token ids) run trajectories with the same code: each mode already
sends one seeded `generate` per sample. It offers the RolloutEngine protocol and nothing more, so nothing can
reach the inner engine's generation around the loop (its `generate_many`, say) by accident.
"""

from __future__ import annotations

from rlrm.engine.agent.loop import AgentSettings, run_agent
from rlrm.engine.agent.tools import ToolCounts, build_tools
from rlrm.inference.base import Completion, SamplingParams


def agent_settings(profile) -> AgentSettings:
    """The loop's settings from `rollout.agent`; the response budget (observations included) is `rollout.max_new_tokens`."""
    cfg = profile.rollout.agent
    return AgentSettings(
        tools=build_tools(cfg.tools, cfg.user_tools),
        max_turns=cfg.max_turns,
        max_response_tokens=profile.rollout.max_new_tokens,
        tool_timeout_s=cfg.tool_timeout_s,
        max_observation_chars=cfg.max_observation_chars,
        call_tag=cfg.call_tag,
        observation_tag=cfg.observation_tag,
        tool_latency=cfg.inject.latency_dist(),
        tool_latency_seed=cfg.inject.seed,
    )


def in_process_engine(profile, policy, tokenizer):
    """The in-process hf rollout engine over `policy`, in the agent loop when `rollout.agent.enabled`, as the trainer
    wraps its engine (rlrm/engine/components.py): for the commands that make samples outside training (`rlrm inspect
    reward`, `rlrm parity reward`), so that every response is what the reward meets in training (with the agent: a
    trajectory with its tool calls run, its observations spliced in and its turns in extra_info)."""
    from rlrm.inference.hf import HFRolloutEngine
    from rlrm.inference.loading import eos_token_ids

    engine = HFRolloutEngine(
        policy, eos_token_ids(tokenizer, policy), tokenizer.pad_token_id, max_batch_size=profile.rollout.max_batch_size
    )
    if profile.rollout.agent.enabled:
        return AgentEngine(engine, tokenizer, agent_settings(profile))
    return engine


class AgentEngine:
    """`inner` with `generate` running the agent loop over it; adds agent/* to `take_metrics`."""

    def __init__(self, inner, tokenizer, settings: AgentSettings):
        self.inner, self.tokenizer, self.settings = inner, tokenizer, settings
        self.counts = ToolCounts()

    @property
    def dtype(self):
        return self.inner.dtype

    async def start(self) -> None:
        await self.inner.start()

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        traj = await run_agent(self.inner, prompt_ids, sampling, self.tokenizer, self.settings, self.counts)
        if traj.loss_mask is None:  # run_agent marks every token of a trajectory
            raise RuntimeError("an agent trajectory came back without its loss mask")
        return traj

    def update_weights(self, state_dict: dict, version: int) -> None:
        self.inner.update_weights(state_dict, version)

    def take_metrics(self) -> dict:
        """The inner engine's metrics and the tool counters of the trajectories generated since the last call (in
        off-policy modes, not those a step trains: the per-trajectory means are the trained ones', from each
        trajectory's meta, rlrm/engine/step.py trajectory_metrics)."""
        return {**self.inner.take_metrics(), **self.counts.take()}

    def take_busy_intervals(self) -> list[tuple[float, float]]:
        return self.inner.take_busy_intervals()

    async def close(self) -> None:
        await self.inner.close()
