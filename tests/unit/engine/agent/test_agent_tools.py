"""The calculator (exact values, every bad input an error string) and the tool runner's outcomes and counters."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import rlrm.engine.agent.tools as tools_module
import rlrm.engine.rewards.side_loop as side_loop_module
from rlrm.engine.agent.calculator import MAX_DIGITS, MAX_INPUT_CHARS, calculator
from rlrm.engine.agent.tools import ToolCounts, build_tools, run_tool


def calc(text: str) -> str:
    return asyncio.run(calculator(text))


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ("12+34", "46"),
        ("2 + 3 * 4", "14"),  # precedence: * before +
        ("(2 + 3) * 4", "20"),
        ("10 - 4 - 3", "3"),  # left-associative
        ("8 / 4 / 2", "1"),
        ("0.1 + 0.2", "0.3"),  # exact, not 0.30000000000000004
        ("1/3", "0.333333"),
        ("-2 * -3", "6"),
        ("-(4 - 10)", "6"),
        ("123456789 * 987654321", "121932631112635269"),
        ("7 / 2", "3.5"),
        ("-7 / 2", "-3.5"),
    ],
)
def test_calculator_values(expr, want):
    assert calc(expr) == want


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("1/0", "division by zero"),
        ("5 / (2 - 2)", "division by zero"),
        ("", "empty expression"),
        ("2 +", "ends too early"),
        ("(2 + 3", "unbalanced parentheses"),
        ("2 + 3)", "unexpected ')'"),
        ("2 ** 3", "unexpected '*'"),
        ("__import__('os')", "unexpected '_'"),
        ("2 3", "unexpected '3'"),
        ("1" + "+1" * MAX_INPUT_CHARS, f"longer than {MAX_INPUT_CHARS}"),
        ("*".join(["99999999999"] * 8), f"more than {MAX_DIGITS} digits"),
    ],
)
def test_calculator_errors_are_observations(expr, reason):
    out = calc(expr)
    assert out.startswith("error: ") and reason in out, out


def test_calculator_deep_nesting_stays_bounded():
    # the input cap bounds the recursion depth: 99 nested parentheses parse, nothing raises
    depth = (MAX_INPUT_CHARS - 1) // 2
    assert calc("(" * depth + "1" + ")" * depth) == "1"


async def _slow(arguments: str) -> str:
    await asyncio.sleep(10)
    return "late"


async def _raises(arguments: str) -> str:
    raise RuntimeError("disk on fire")


async def _huge(arguments: str) -> str:
    return "x" * 1_000_000


def test_run_tool_outcomes_become_observations_and_are_counted():
    tools = {**build_tools(["calculator"]), "slow": _slow, "raises": _raises, "huge": _huge}
    counts = ToolCounts()

    def run(name, args="1"):
        return asyncio.run(run_tool(tools, name, args, timeout_s=0.05, max_chars=100, counts=counts))

    assert run("calculator", "2+2") == "4"
    assert run("slow") == "error: tool slow took longer than 0.05s"
    assert run("raises") == "error: tool raises failed: RuntimeError: disk on fire"
    assert run("huge") == "x" * 100
    assert run("nope").startswith("error: unknown tool 'nope'; tools: calculator, huge, raises, slow")
    assert run("calculator", "1/0") == "error: division by zero"
    metrics = counts.take()
    assert metrics == {
        "agent/tool_calls": 6.0,
        "agent/tool_errors": 2.0,  # the raise and the calculator's own error answer
        "agent/tool_timeouts": 1.0,
        "agent/truncated_observations": 1.0,
        "agent/unknown_tools": 1.0,
        "agent/malformed_calls": 0.0,
        "agent/version_restarts": 0.0,
    }
    assert counts.take()["agent/tool_calls"] == 0.0  # take() zeroes


def test_build_tools_unknown_name_lists_known_ones():
    with pytest.raises(ValueError, match="unknown tool.*search; known tools: calculator"):
        build_tools(["calculator", "search"])


def test_user_tools_load_from_their_file_and_run_like_built_ins(tmp_path):
    from rlrm.errors import ConfigError

    good = tmp_path / "good.py"
    good.write_text(
        "async def shout(arguments):\n    return arguments.upper()\n\ndef plain(arguments):\n    return ''\n"
    )
    tools = build_tools(["calculator", "shout"], {"shout": f"{good}:shout"})
    counts = ToolCounts()
    assert asyncio.run(run_tool(tools, "shout", "hi", 1.0, 100, counts)) == "HI"
    with pytest.raises(ConfigError, match=r"user_tools.p: .*good.py has no `async def plain\(arguments: str\) -> str`"):
        build_tools(["p"], {"p": f"{good}:plain"})
    broken = tmp_path / "broken.py"
    broken.write_text("import not_a_module_anywhere\n")
    with pytest.raises(ConfigError, match="broken.py failed to import: ModuleNotFoundError"):
        build_tools(["b"], {"b": f"{broken}:b"})


def test_the_example_user_tool_runs():
    example = Path(__file__).resolve().parents[4] / "examples" / "tools" / "lookup.py"
    tools = build_tools(["lookup"], {"lookup": f"{example}:lookup"})
    counts = ToolCounts()
    assert asyncio.run(run_tool(tools, "lookup", " Paris ", 1.0, 100, counts)) == "France"
    assert asyncio.run(run_tool(tools, "lookup", "oslo", 1.0, 100, counts)) == "error: no capital named 'oslo'"


async def _scored(arguments: str):
    return arguments[::-1], float(len(arguments))


async def _bad_reward(arguments: str):
    return "text", float("nan") if arguments == "nan" else "high"


def test_a_tool_reward_is_collected_and_a_bad_one_is_an_error():
    tools = {"scored": _scored, "bad": _bad_reward}
    counts, rewards = ToolCounts(), []

    def run(name, args):
        return asyncio.run(run_tool(tools, name, args, 1.0, 100, counts, rewards))

    assert run("scored", "abc") == "cba"
    assert rewards == [3.0]
    assert run("bad", "nan") == "error: tool bad returned the reward nan, not a finite number"
    assert run("bad", "x") == "error: tool bad returned the reward 'high', not a finite number"
    assert rewards == [3.0] and counts.take()["agent/tool_errors"] == 2.0


def test_every_observation_keeps_to_max_observation_chars():
    """The error texts too: an unknown tool's name is the policy's own text, a reward's repr the tool's."""
    tools = build_tools(["calculator"])

    async def huge_reward(arguments):
        return "ok", [0.0] * 10_000

    async def slow(arguments):
        await asyncio.sleep(5)
        return "late"

    tools["huge_reward"], tools[f"slow_{'x' * 300}"] = huge_reward, slow
    calls = [("x" * 5_000, "1"), ("huge_reward", "1"), (f"slow_{'x' * 300}", "1")]
    for name, arguments in calls:
        seen = asyncio.run(run_tool(tools, name, arguments, 0.05, 64, ToolCounts()))
        assert seen.startswith("error:") and len(seen) <= 64, (name[:20], len(seen))


@pytest.fixture(params=["native", "py310"])
def python(request, monkeypatch) -> str:
    """The runner on the Python running the suite, and as 3.10 runs it: the tool's own task (`_wait_for_task`), and
    every CancelledError read as that task's own (rlrm/engine/rewards/threads.py `being_cancelled` before 3.11)."""
    if request.param == "py310":
        monkeypatch.setattr(tools_module, "_wait_for", tools_module._wait_for_task)
        for module in (tools_module, side_loop_module):
            monkeypatch.setattr(module, "being_cancelled", lambda: True, raising=False)
    return request.param


OWN_FAULTS = """
import asyncio


async def upstream(arguments: str) -> str:
    raise TimeoutError("upstream API timed out")  # its own HTTP client gave up, at once


async def cancelled(arguments: str) -> str:
    inner = asyncio.ensure_future(asyncio.sleep(10))  # a task of its own, cancelled: it lets the error through
    asyncio.get_running_loop().call_soon(inner.cancel)
    return await inner
"""


def test_a_tools_own_timeout_or_cancellation_is_its_error_not_the_runners(python, tmp_path):
    # the builtin TimeoutError is asyncio's on 3.11: a tool's own read as "took longer than 10s" (agent/tool_timeouts);
    # a CancelledError of a task it awaited escaped run_tool and ended the trajectory
    path = tmp_path / "own_faults.py"
    path.write_text(OWN_FAULTS)
    tools = build_tools(["upstream", "cancelled"], {"upstream": f"{path}:upstream", "cancelled": f"{path}:cancelled"})
    counts = ToolCounts()

    async def both():
        return [await run_tool(tools, name, "x", timeout_s=10, max_chars=256, counts=counts) for name in tools]

    timed_out, cancelled = asyncio.run(both())
    assert timed_out == "error: tool upstream failed: TimeoutError: upstream API timed out"
    assert cancelled.startswith("error: tool cancelled failed: ") and "CancelledError" in cancelled
    took = counts.take()
    assert took["agent/tool_errors"] == 2 and took.get("agent/tool_timeouts", 0) == 0


def test_a_cancelled_error_of_a_tool_off_a_side_loop_is_its_error_and_the_deadline_still_holds(python):
    # a tool that runs on the caller's loop (a built-in's kind): on 3.10 its own CancelledError escaped run_tool
    async def cancelled(arguments: str) -> str:
        inner = asyncio.ensure_future(asyncio.sleep(10))
        asyncio.get_running_loop().call_soon(inner.cancel)
        return await inner

    async def slow(arguments: str) -> str:
        await asyncio.sleep(10)
        return "late"

    async def stubborn(arguments: str) -> str:  # answers all the same when its deadline cancels it
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            pass
        return "answered while cancelled"

    tools = {"cancelled": cancelled, "slow": slow, "stubborn": stubborn}
    counts = ToolCounts()

    async def main():
        seen = [await run_tool(tools, name, "x", timeout_s=0.05, max_chars=256, counts=counts) for name in tools]
        stopped = asyncio.ensure_future(run_tool(tools, "slow", "x", timeout_s=5, max_chars=256, counts=counts))
        await asyncio.sleep(0.05)
        stopped.cancel()  # the trajectory's own cancellation goes on as it is
        with pytest.raises(asyncio.CancelledError):
            await stopped
        return seen

    assert asyncio.run(main()) == [
        "error: tool cancelled failed: CancelledError: ",
        "error: tool slow took longer than 0.05s",
        "answered while cancelled",
    ]
    took = counts.take()
    assert (took["agent/tool_errors"], took["agent/tool_timeouts"]) == (1, 1)


@pytest.mark.parametrize("reward", ["np.float32(0.5)", "np.int64(1)", "torch.tensor(0.5)"])
def test_a_tool_reward_of_numpy_or_torch_is_a_reward(reward):
    # computed with numpy, as verl's and TRL's tools often are: it was a tool error naming a finite number non-finite
    import numpy as np
    import torch

    value = eval(reward, {"np": np, "torch": torch})

    async def scored(arguments):
        return "ok", value

    counts, rewards = ToolCounts(), []
    assert asyncio.run(run_tool({"s": scored}, "s", "x", 5, 256, counts, rewards)) == "ok"
    assert rewards == [float(value)] and counts.take()["agent/tool_errors"] == 0.0
