"""`rlrm parity reward` without --input on an agent profile: the generated samples are the agent loop's
trajectories, as the first training step of that profile makes them."""

from __future__ import annotations

from rlrm.config.loader import load_profile
from rlrm.parity.inputs import generate_samples


def test_generated_samples_of_an_agent_profile_are_trajectories(tiny_tools_path):
    profile = load_profile("tiny-tools", [])
    samples = generate_samples(profile, num_prompts=3, n=2, seed=0)
    assert len(samples) == 6
    with_call = [s for s in samples if "<call>calculator" in s.response]
    assert with_call, [s.response for s in samples]
    for s in with_call:
        info = s.extra_info
        assert "<obs>" in s.response, s.response  # the call was run, its result spliced in
        tools = [t["text"] for t in info["turns"] if t["role"] == "tool"]
        assert tools and [c["result"] for c in info["tool_calls"]] == tools
        assert info["num_turns"] == len(info["turns"]) + 1
