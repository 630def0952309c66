"""`rollout.agent.inject`: tool latency in the reward grammar, slept before every tool call, inside its timeout."""

from __future__ import annotations

import asyncio
import time

import pytest
from pydantic import ValidationError

from rlrm.config.agent import AgentConfig
from rlrm.config.latency import parse_latency
from rlrm.engine.agent.tools import ToolCounts, build_tools, run_tool
from tests.unit.engine.agent.test_agent_loop import ScriptedEngine, run, settings


@pytest.fixture(scope="module")
def tokenizer(tiny_policy_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_policy_path)


TWO_CALLS = ["<call>calculator 1+1</call>", "<call>calculator 2+2</call>", "#### 4<|im_end|>"]


def test_config_takes_the_reward_grammar_and_refuses_a_bad_spec():
    cfg = AgentConfig(inject={"latency": "uniform:0.1:0.3", "scale": 2})
    assert cfg.inject.latency_dist() == parse_latency("uniform:0.1:0.3").scaled(2)
    assert AgentConfig().inject.latency_dist() is None
    assert AgentConfig(inject={"latency": 0}).inject.latency_dist() is None  # `--set ...latency=0` is a number
    with pytest.raises(ValidationError, match="bad latency spec 'fixd:1': unknown kind 'fixd'"):
        AgentConfig(inject={"latency": "fixd:1"})


def test_every_tool_call_sleeps_its_injected_delay_without_blocking_the_loop(tokenizer):
    # a ticker on the same event loop keeps running while the tools sleep: the delay is asyncio.sleep, not time.sleep
    ticks = []

    async def both():
        async def ticker():
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        task = asyncio.ensure_future(ticker())
        try:
            return await _traj(tokenizer)
        finally:
            task.cancel()

    t0 = time.monotonic()
    traj, counts = asyncio.run(both())
    elapsed = time.monotonic() - t0
    assert counts.counts["tool_calls"] == 2 and counts.counts["tool_timeouts"] == 0
    assert elapsed >= 2 * 0.15  # two calls, fixed:0.15 each
    assert len(ticks) >= 10  # the loop ran other work during the 0.3 s of sleeping
    results = [t["tool_result"] for t in traj.meta["agent"]["turns"] if "tool_result" in t]
    assert results == ["2", "4"]  # the tools still ran after their delay


async def _traj(tokenizer):
    from rlrm.engine.agent.loop import run_agent
    from rlrm.inference.base import SamplingParams

    engine = ScriptedEngine(tokenizer, TWO_CALLS)
    counts = ToolCounts()
    prompt = tokenizer.encode("Go", add_special_tokens=False)
    s = settings(tool_latency=parse_latency("fixed:0.15"))
    return await run_agent(engine, prompt, SamplingParams(seed=3), tokenizer, s, counts), counts


def test_a_delay_past_the_timeout_is_a_timed_out_call(tokenizer):
    traj, counts = run(
        ScriptedEngine(tokenizer, TWO_CALLS), tokenizer, tool_latency=parse_latency("fixed:5"), tool_timeout_s=0.05
    )
    assert counts.counts["tool_timeouts"] == 2 and counts.counts["tool_calls"] == 2
    results = [t["tool_result"] for t in traj.meta["agent"]["turns"] if "tool_result" in t]
    assert results == ["error: tool calculator took longer than 0.05s"] * 2


def test_run_tool_counts_the_delay_inside_the_timeout():
    tools = build_tools(["calculator"])
    counts = ToolCounts()
    assert asyncio.run(run_tool(tools, "calculator", "3*3", 1.0, 256, counts, delay_s=0.02)) == "9"
    assert asyncio.run(run_tool(tools, "calculator", "3*3", 0.02, 256, counts, delay_s=0.5)).startswith("error:")
    assert counts.counts == {**counts.counts, "tool_calls": 2, "tool_timeouts": 1}


def test_draws_depend_on_the_seeds_and_the_call_only():

    s = settings(tool_latency=parse_latency("uniform:0:1"), tool_latency_seed=5)
    assert s.tool_delay_s(3, 0) == s.tool_delay_s(3, 0)
    assert len({s.tool_delay_s(3, k) for k in range(4)} | {s.tool_delay_s(4, 0)}) == 5
    assert settings().tool_delay_s(3, 0) == 0.0
