"""The agent loop over a scripted engine with the tiny tokenizer: splicing, masks, cuts, budgets and bad calls."""

from __future__ import annotations

import asyncio

import pytest

from rlrm.engine.agent.loop import AgentSettings, run_agent
from rlrm.engine.agent.tools import ToolCounts, build_tools
from rlrm.inference.base import Completion, SamplingParams


@pytest.fixture(scope="module")
def tokenizer(tiny_policy_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_policy_path)


class ScriptedEngine:
    """A RolloutEngine that 'generates' scripted turns: it honours stop ids and max_new_tokens like a real one.

    What a request leaves unwritten (after a stop token) is written by the next request; with
    `ignore_stops` it writes a whole scripted turn past any stop token, as an engine without the hint would.
    New weights (version + 1) land before each request whose 1-based number is in `bumps`.
    """

    def __init__(self, tokenizer, script: list[str], ignore_stops: bool = False, bumps=()):
        self.tok, self.script, self.ignore_stops, self.bumps = tokenizer, list(script), ignore_stops, set(bumps)
        self.pending: list[int] = []
        self.prompts: list[list[int]] = []
        self.version = 0

    async def generate(self, prompt_ids, sampling: SamplingParams) -> Completion:
        self.prompts.append(list(prompt_ids))
        self.version += len(self.prompts) in self.bumps
        if not self.pending:
            self.pending = self.tok.encode(self.script.pop(0), add_special_tokens=False)
        out, reason = [], "length"
        stops = set() if self.ignore_stops else set(sampling.stop_token_ids or [])
        while self.pending and len(out) < sampling.max_new_tokens:
            out.append(self.pending.pop(0))
            if out[-1] in stops or out[-1] == self.tok.eos_token_id:
                reason = "stop"
                break
        if self.ignore_stops:
            self.pending = []
        log_probs = [-0.01 * (len(self.prompts) * 100 + i) for i in range(len(out))]
        return Completion(list(prompt_ids), out, log_probs, reason, policy_version=self.version)

    def take_metrics(self) -> dict:
        return {"rollout/inner": 1.0}


def settings(**kw) -> AgentSettings:
    base = {"tools": build_tools(["calculator"]), "max_turns": 4, "max_response_tokens": 200}
    return AgentSettings(**{**base, **kw})


def run(engine, tokenizer, prompt="What is 12+34?", counts=None, **kw) -> tuple[Completion, ToolCounts]:
    counts = counts or ToolCounts()
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    traj = asyncio.run(run_agent(engine, prompt_ids, SamplingParams(seed=3), tokenizer, settings(**kw), counts))
    return traj, counts


def test_two_turns_splice_the_observation_with_mask_zero(tokenizer):
    engine = ScriptedEngine(tokenizer, ["Sum: <call>calculator 12+34</call>", "#### 46<|im_end|>"], bumps=[4])
    traj, counts = run(engine, tokenizer)
    assert tokenizer.decode(traj.token_ids) == "Sum: <call>calculator 12+34</call><obs>46</obs>#### 46<|im_end|>"
    first = tokenizer.encode("Sum: <call>calculator 12+34</call>", add_special_tokens=False)
    obs = tokenizer.encode("<obs>46</obs>", add_special_tokens=False)
    a, b = len(first), len(first) + len(obs)
    assert traj.token_ids[a:b] == obs  # never re-tokenised: the observation's own ids
    assert traj.loss_mask == [1] * a + [0] * len(obs) + [1] * (len(traj.token_ids) - b)
    assert traj.log_probs[a:b] == [0.0] * len(obs)
    assert all(lp < 0 for lp in traj.log_probs[:a] + traj.log_probs[b:])
    assert len(traj.log_probs) == len(traj.token_ids) == len(traj.loss_mask)
    # the request after the tool call continues from the prompt + everything so far, observation included
    assert engine.prompts[-1] == traj.prompt_ids + traj.token_ids[:b]
    assert traj.finish_reason == "stop"
    agent = traj.meta["agent"]
    # `<call>`'s own `>` stops the first request (a false hint), `</call>`'s stops the second, then the answer
    assert agent["policy_versions"] == [0, 0, 0] and traj.policy_version == 0
    extra = agent["extra_info"]
    assert extra["num_turns"] == 4  # verl: user (tool) turns + assistant turns + 1
    assert extra["tool_calls"] == [{"name": "calculator", "arguments": "12+34", "result": "46"}]
    assert extra["tool_rewards"] == []  # the calculator reports no reward
    assert counts.take()["agent/tool_calls"] == 1.0


def test_engine_that_runs_past_the_tag_is_cut_after_it(tokenizer):
    engine = ScriptedEngine(tokenizer, ["<call>calculator 2*3</call> and more text", "#### 6<|im_end|>"], True)
    traj, _ = run(engine, tokenizer)
    assert tokenizer.decode(traj.token_ids) == "<call>calculator 2*3</call><obs>6</obs>#### 6<|im_end|>"
    assert len(traj.log_probs) == len(traj.token_ids)


def test_last_turn_ending_in_a_call_stops_with_max_turns_and_runs_nothing(tokenizer):
    engine = ScriptedEngine(tokenizer, ["<call>calculator 1+1</call>"])
    traj, counts = run(engine, tokenizer, max_turns=1)
    assert traj.finish_reason == "max_turns"
    assert tokenizer.decode(traj.token_ids) == "<call>calculator 1+1</call>"
    assert set(traj.loss_mask) == {1}
    assert counts.take()["agent/tool_calls"] == 0.0


def test_observation_past_the_budget_is_truncated_and_finishes_length(tokenizer):
    call = "<call>calculator 123456789*987654321</call>"
    engine = ScriptedEngine(tokenizer, [call, "never"])
    budget = len(tokenizer.encode(call, add_special_tokens=False)) + 4
    traj, _ = run(engine, tokenizer, max_response_tokens=budget)
    assert traj.finish_reason == "length"
    assert len(traj.token_ids) == len(traj.loss_mask) == budget
    assert traj.loss_mask[-4:] == [0, 0, 0, 0]
    # what the reward reads of it is what the policy read: the 4 tokens, not the whole result (121932631112635269)
    (tool,) = [t for t in traj.meta["agent"]["turns"] if t["role"] == "tool"]
    seen = tokenizer.decode(traj.token_ids[-4:]).removeprefix("<obs>")
    assert tool["text"] == seen and "121932631112635269" not in tool["text"]
    assert traj.meta["agent"]["extra_info"]["tool_calls"][0]["result"] == seen


def test_budget_runs_out_inside_a_turn(tokenizer):
    engine = ScriptedEngine(tokenizer, ["a long answer that goes on and on<|im_end|>"])
    traj, _ = run(engine, tokenizer, max_response_tokens=5)
    assert traj.finish_reason == "length" and len(traj.token_ids) == 5


@pytest.mark.parametrize(
    ("turn", "observation", "counter"),
    [
        (
            "<call></call>",
            "<obs>error: malformed tool call; write <call>NAME ARGUMENTS</call></obs>",
            "malformed_calls",
        ),
        ("oops</call>", "<obs>error: malformed tool call; write <call>NAME ARGUMENTS</call></obs>", "malformed_calls"),
        ("<call>search cats</call>", "<obs>error: unknown tool 'search'; tools: calculator</obs>", "unknown_tools"),
        ("<call>calculator 1/0</call>", "<obs>error: division by zero</obs>", "tool_errors"),
    ],
)
def test_bad_calls_become_observations_and_are_counted(tokenizer, turn, observation, counter):
    engine = ScriptedEngine(tokenizer, [turn, "#### 0<|im_end|>"])
    traj, counts = run(engine, tokenizer)
    assert tokenizer.decode(traj.token_ids) == f"{turn}{observation}#### 0<|im_end|>"
    assert counts.take()[f"agent/{counter}"] == 1.0


def test_unterminated_call_at_eos_is_counted_and_the_answer_stands(tokenizer):
    engine = ScriptedEngine(tokenizer, ["<call>calculator 2+2<|im_end|>"])
    traj, counts = run(engine, tokenizer)
    assert traj.finish_reason == "stop"
    assert counts.take()["agent/malformed_calls"] == 1.0


def test_agent_engine_counts_turns_observations_and_mixed_versions(tokenizer):
    from rlrm.engine.agent.engine import AgentEngine

    script = ["<call>calculator 1+2</call>", "#### 3<|im_end|>", "#### 5<|im_end|>"]
    inner = ScriptedEngine(tokenizer, script, bumps=[4])  # new weights between the two trajectories
    engine = AgentEngine(inner, tokenizer, settings())
    prompt = tokenizer.encode("1+2?", add_special_tokens=False)
    trajectories = [asyncio.run(engine.generate(prompt, SamplingParams(seed=1))) for _ in range(2)]
    metrics = engine.take_metrics()
    obs = len(tokenizer.encode("<obs>3</obs>", add_special_tokens=False))
    assert metrics["rollout/inner"] == 1.0  # the inner engine's own metrics pass through
    assert metrics["agent/tool_calls"] == 1.0 and metrics["agent/version_restarts"] == 0.0
    assert engine.take_metrics()["agent/tool_calls"] == 0.0  # taken: nothing since
    # the means are the trained trajectories' (the step's, rlrm/engine/step.py), from each one's meta
    from rlrm.engine.step import trajectory_metrics

    means = trajectory_metrics(trajectories)
    assert means["agent/turns_mean"] == pytest.approx(1.5)  # two turns, then one
    assert means["agent/observation_tokens_mean"] == pytest.approx(obs / 2)
    assert means["agent/mixed_version_ratio"] == 0.0 and means["agent/max_turns_ratio"] == 0.0
    assert trajectory_metrics(trajectories[:1])["agent/turns_mean"] == 2.0


def test_new_weights_mid_trajectory_start_it_over_under_them(tokenizer):
    call = "<call>calculator 1+2</call>"
    engine = ScriptedEngine(tokenizer, [call, "lost", call, "#### 3<|im_end|>"], ignore_stops=True, bumps=[2])
    traj, counts = run(engine, tokenizer)
    assert tokenizer.decode(traj.token_ids) == f"{call}<obs>3</obs>#### 3<|im_end|>"
    assert traj.meta["agent"]["policy_versions"] == [1, 1] and traj.policy_version == 1
    metrics = counts.take()
    assert metrics["agent/version_restarts"] == 1.0 and metrics["agent/tool_calls"] == 2.0  # the tool ran again


def test_weights_changing_every_request_end_in_a_kept_mixed_trajectory(tokenizer):
    from rlrm.engine.agent.loop import MAX_RESTARTS

    call = "<call>calculator 1+2</call>"
    script = [call, "lost"] * MAX_RESTARTS + [call, "#### 3<|im_end|>"]
    engine = ScriptedEngine(tokenizer, script, ignore_stops=True, bumps=range(2, 100))
    traj, counts = run(engine, tokenizer)
    versions = traj.meta["agent"]["policy_versions"]
    assert len(set(versions)) == 2 and traj.policy_version == min(versions)  # kept, and counted as the oldest
    assert counts.take()["agent/version_restarts"] == float(MAX_RESTARTS)


def test_rewards_tools_return_reach_extra_info(tokenizer):
    async def judge(arguments: str):
        return "checked", 0.25

    tools = {**build_tools(["calculator"]), "judge": judge}
    script = ["<call>judge 46</call>", "<call>calculator 1+1</call>", "<call>judge 2</call>", "#### 2<|im_end|>"]
    traj, _ = run(ScriptedEngine(tokenizer, script, ignore_stops=True), tokenizer, tools=tools)
    extra = traj.meta["agent"]["extra_info"]
    assert extra["tool_rewards"] == [0.25, 0.25]  # one per call that returned one, in order
    assert [c["result"] for c in extra["tool_calls"]] == ["checked", "2", "checked"]


def test_the_tags_are_settings(tokenizer):
    engine = ScriptedEngine(tokenizer, ["<c>calculator 6*7</c> junk", "#### 42<|im_end|>"], ignore_stops=True)
    traj, counts = run(engine, tokenizer, call_tag="c", observation_tag="r")
    assert tokenizer.decode(traj.token_ids) == "<c>calculator 6*7</c><r>42</r>#### 42<|im_end|>"
    assert counts.take()["agent/tool_calls"] == 1.0


def test_the_samples_of_a_group_never_share_a_requests_draws(tokenizer):
    """A trajectory's requests get fresh seeds, its first the sample's own; a group's samples have consecutive
    seeds (request_seed), so `seed + request` once gave sample 0's second request sample 1's first one's draws."""
    from rlrm.engine.scheduling.requests import request_seed

    class Seeds(ScriptedEngine):
        async def generate(self, prompt_ids, sampling):
            self.seen.append(sampling.seed)
            return await super().generate(prompt_ids, sampling)

    prompt = tokenizer.encode("What is 1+1?", add_special_tokens=False)
    used = []
    for j in range(4):  # rollout.n = 4, seeded as generate_groups seeds them
        engine = Seeds(tokenizer, ["<call>calculator 1+1</call>", "#### 2", "<call>calculator 2+2</call>", "#### 4"])
        engine.seen = []
        sampling = SamplingParams(seed=request_seed(0, 1, 0, j), temperature=1.0)
        asyncio.run(run_agent(engine, prompt, sampling, tokenizer, settings(), ToolCounts()))
        assert engine.seen[0] == sampling.seed and len(engine.seen) >= 2
        used.append(engine.seen)
    every = [seed for seeds in used for seed in seeds]
    assert len(set(every)) == len(every), used


def test_a_call_whose_tags_are_special_tokens_is_parsed(tiny_policy_path):
    # tags that are tokens of their own (as some vocabularies have <tool_call>): the turn's text was decoded without
    # special tokens, so every call the policy closed was read as malformed and no tool ran
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_policy_path)
    tok.add_special_tokens({"additional_special_tokens": ["<call>", "</call>"]})
    traj, counts = run(ScriptedEngine(tok, ["<call>calculator 2+2</call>", "#### 4<|im_end|>"]), tok)
    (call,) = traj.meta["agent"]["extra_info"]["tool_calls"]
    assert call["name"] == "calculator" and call["result"] == "4"
    assert traj.meta["agent"]["turns"][0]["text"] == "<call>calculator 2+2</call>"  # as the judge's {turns} show it
    assert counts.take()["agent/malformed_calls"] == 0.0
