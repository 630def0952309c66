"""Agent trajectories in process: reward samples carry the trajectory, and the engine's log-probs of later turns match the actor's."""

from __future__ import annotations

import pytest

from rlrm.inference.base import Completion
from rlrm.inference.hf import HFRolloutEngine

CALL = "<call>calculator 2+2</call>"


def force_first_turn(monkeypatch, engine_class, tokenizer):
    """The tiny policy never writes a call by itself: the first turn of every trajectory becomes CALL + " 7",
    written past the stop hint (so the loop's tail cut runs too); later turns are really sampled."""
    real_generate = engine_class.generate

    async def first_turn_calls(self, prompt_ids, sampling):
        if "<call>" not in tokenizer.decode(prompt_ids):
            ids = tokenizer.encode(CALL + " 7", add_special_tokens=False)
            return Completion(list(prompt_ids), ids, [-1.0] * len(ids), "length", policy_version=self.version)
        return await real_generate(self, prompt_ids, sampling)

    monkeypatch.setattr(engine_class, "generate", first_turn_calls)


@pytest.fixture(scope="module")
def tokenizer(tiny_policy_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_policy_path)


def test_reward_samples_carry_the_trajectory_in_extra_info(tiny_policy_path):
    from transformers import AutoTokenizer

    from rlrm.engine.data.example import Example
    from rlrm.engine.scheduling.requests import reward_samples

    tok = AutoTokenizer.from_pretrained(tiny_policy_path)
    example = Example("s/0", [{"role": "user", "content": "2+2?"}], "4", "synthetic", {"split": "train"})
    agent = {"extra_info": {"num_turns": 4, "tool_calls": [{"name": "calculator", "arguments": "2+2", "result": "4"}]}}
    traj = Completion([1], [30, 31], [-1.0, 0.0], "stop", meta={"agent": agent}, loss_mask=[1, 0])
    plain = Completion([1], [30], [-1.0], "stop")
    with_agent, without = reward_samples(tok, [example], [traj, plain], n=2)
    assert with_agent.extra_info == {"split": "train", **agent["extra_info"]}
    assert without.extra_info == {"split": "train"}
    assert example.extra_info == {"split": "train"}  # the example's own dict is never written into


def test_engine_log_probs_of_later_turns_match_the_actors_scoring_of_the_trajectory(tiny_policy_path, tokenizer):
    # each later turn is generated from (prompt + earlier turns + observation) in its own request; the actor
    # scores the whole trajectory in one pass: the log-probs must agree, or PPO ratios of later turns are wrong
    import asyncio
    import copy

    from rlrm.engine.actor.batch import collate
    from rlrm.engine.actor.logprobs import response_log_probs
    from rlrm.engine.agent.engine import AgentEngine
    from rlrm.engine.agent.loop import AgentSettings
    from rlrm.engine.agent.tools import build_tools
    from rlrm.inference.base import SamplingParams
    from rlrm.inference.loading import eos_token_ids, load_causal_lm

    policy = load_causal_lm(str(tiny_policy_path), "float32", "cpu")
    inner = HFRolloutEngine(copy.deepcopy(policy), eos_token_ids=eos_token_ids(tokenizer, policy), pad_token_id=0)
    with pytest.MonkeyPatch.context() as mp:
        force_first_turn(mp, HFRolloutEngine, tokenizer)
        settings = AgentSettings(tools=build_tools(["calculator"]), max_turns=3, max_response_tokens=60)
        engine = AgentEngine(inner, tokenizer, settings)
        prompts = [tokenizer.encode(q, add_special_tokens=False) for q in ("What is 2+2?", "Add 2 and 2.")]

        async def go():
            try:
                return await asyncio.gather(
                    *(engine.generate(p, SamplingParams(seed=i)) for i, p in enumerate(prompts))
                )
            finally:
                await inner.close()

        trajectories = asyncio.run(go())
    batch = collate(trajectories, tokenizer.pad_token_id)
    actor_lp = response_log_probs(policy, batch, 1.0, 8)[0].detach()
    call_obs = len(tokenizer.encode(CALL + "<obs>4</obs>", add_special_tokens=False))
    later = batch.response_mask.clone()
    later[:, :call_obs] = 0  # the forced first turn has made-up log-probs; everything after is sampled
    assert later.sum() > 0
    gap = ((actor_lp - batch.rollout_log_prob).abs() * later).max().item()
    assert gap < 1e-4, gap
