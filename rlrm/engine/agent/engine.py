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


class AgentEngine:
    """`inner` with `generate` running the agent loop over it; adds agent/* to `take_metrics`."""

    def __init__(self, inner, tokenizer, settings: AgentSettings):
        self.inner, self.tokenizer, self.settings = inner, tokenizer, settings
        self.counts = ToolCounts()
        self._reset()

    def _reset(self) -> None:
        self._trajectories = self._turns = self._obs_tokens = self._max_turns = self._mixed = 0

    @property
    def dtype(self):
        return self.inner.dtype

    async def start(self) -> None:
        await self.inner.start()

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        traj = await run_agent(self.inner, prompt_ids, sampling, self.tokenizer, self.settings, self.counts)
        if traj.loss_mask is None:  # run_agent marks every token of a trajectory
            raise RuntimeError("an agent trajectory came back without its loss mask")
        turns = traj.meta["agent"]["turns"]
        self._trajectories += 1
        self._turns += sum(1 for t in turns if t["role"] == "assistant")
        self._obs_tokens += len(traj.loss_mask) - sum(traj.loss_mask)
        self._max_turns += traj.finish_reason == "max_turns"
        # new weights landed mid-trajectory (off-policy modes): counted, not yet prevented
        self._mixed += len(set(traj.meta["agent"]["policy_versions"])) > 1
        return traj

    def update_weights(self, state_dict: dict, version: int) -> None:
        self.inner.update_weights(state_dict, version)

    def take_metrics(self) -> dict:
        """The inner engine's metrics, the tool counters, and per-trajectory means since the last call.

        agent/turns_mean, agent/observation_tokens_mean, agent/max_turns_ratio, and agent/mixed_version_ratio
        (the share of trajectories whose turns came from more than one policy version).
        """
        out = {**self.inner.take_metrics(), **self.counts.take()}
        n = max(self._trajectories, 1)
        if self._trajectories:
            out["agent/turns_mean"] = self._turns / n
            out["agent/observation_tokens_mean"] = self._obs_tokens / n
            out["agent/max_turns_ratio"] = self._max_turns / n
            out["agent/mixed_version_ratio"] = self._mixed / n
        self._reset()
        return out

    def take_busy_intervals(self) -> list[tuple[float, float]]:
        return self.inner.take_busy_intervals()

    async def close(self) -> None:
        await self.inner.close()
