"""`rlrm inspect reward --profile P --n K` on an agent profile: the policy's samples are trajectories made by the
agent loop, as training makes them (tool calls run, observations spliced in, the turns in extra_info)."""

from __future__ import annotations

import asyncio

from rlrm.config.loader import load_profile
from rlrm.reward_checks.samples import policy_samples


def test_policy_samples_of_an_agent_profile_are_the_trainings_trajectories(tiny_tools_path):
    from rlrm.engine.components import build_components
    from rlrm.engine.data.prompts import encode_prompts
    from rlrm.engine.scheduling.requests import generate_groups, reward_samples, sampling_params

    profile = load_profile("tiny-tools", [])  # tiny:tools calls the calculator on part of the prompts
    assert profile.rollout.agent.enabled
    samples = policy_samples(profile, k=4, seed=0)
    with_call = [s for s in samples if "<call>calculator" in s.solution_str]
    assert with_call, [s.solution_str for s in samples]
    for s in with_call:
        info = s.extra_info
        assert "<obs>" in s.solution_str, s.solution_str  # the call was run and its result spliced in
        tools = [t for t in info["turns"] if t["role"] == "tool"]
        assert tools and info["num_turns"] == len(info["turns"]) + 1
        assert [c["result"] for c in info["tool_calls"]] == [t["text"] for t in tools]
        assert all(c["name"] == "calculator" for c in info["tool_calls"])

    # the trainer's own engine (rlrm/engine/components.py) on the same prompts and seed gives the same samples
    parts = build_components(profile)
    prompt_ids, kept, _ = encode_prompts(
        parts.test_examples[:4], parts.tokenizer, profile.data.max_prompt_length, profile.data.prompt_too_long
    )

    async def run():
        try:
            return await generate_groups(parts.engine, prompt_ids, sampling_params(profile), 1, 0, step=0)
        finally:
            await parts.engine.close()

    trained = reward_samples(parts.tokenizer, kept, asyncio.run(run()), 1)
    assert [s.solution_str for s in samples] == [s.solution_str for s in trained]
    assert [s.extra_info for s in samples] == [s.extra_info for s in trained]
