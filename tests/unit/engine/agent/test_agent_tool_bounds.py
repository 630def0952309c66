"""User tools that misbehave in ways a timeout on the caller's loop cannot catch: a tool that blocks inside its
`async def`, one that raises SystemExit or KeyboardInterrupt, one whose exception cannot be printed, one that
returns a `str` subclass, one that swallows its cancellation. Each is one observation and one counter; no other
rollout waits for it."""

from __future__ import annotations

import asyncio
import inspect
import textwrap

from rlrm.engine.agent.tools import ToolCounts, build_tools, run_tool

TOOLS = textwrap.dedent(
    """
    import asyncio, sys, threading, time

    RELEASE = threading.Event()   # the test sets it at the end, so the blocked thread ends with the test

    async def stuck(arguments):
        RELEASE.wait(30)          # blocks the loop it runs on, as time.sleep or requests.get would
        return "finally"

    async def quick(arguments):
        await asyncio.sleep(0)
        return arguments.upper()

    async def exits(arguments):
        sys.exit(3)

    async def interrupted(arguments):
        raise KeyboardInterrupt

    class Unprintable(Exception):
        def __str__(self):
            raise ValueError("no text for you")

    async def unprintable(arguments):
        raise Unprintable()

    class Loud(str):
        def __len__(self):
            raise RuntimeError("len of a str subclass")
        def startswith(self, *args):
            raise RuntimeError("startswith of a str subclass")

    async def loud(arguments):
        return Loud("hello")

    async def stubborn(arguments):
        end = time.monotonic() + 3
        while time.monotonic() < end:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                pass              # swallows its cancellation and goes on
        return "late"
    """
)
NAMES = ["stuck", "quick", "exits", "interrupted", "unprintable", "loud", "stubborn"]


def _tools(tmp_path):
    path = tmp_path / "bad_tools.py"
    path.write_text(TOOLS)
    return build_tools(NAMES, {n: f"{path}:{n}" for n in NAMES})


def test_a_tool_that_blocks_its_loop_times_out_while_other_rollouts_go_on(tmp_path):
    tools = _tools(tmp_path)
    release = inspect.unwrap(tools["stuck"]).__globals__["RELEASE"]
    counts = ToolCounts()
    ticks = {"during_block": 0}

    async def other_rollout():
        # another trajectory on the same loop: it must advance while the blocked tool holds its own thread
        while not release.is_set() and not done.is_set():
            await asyncio.sleep(0.01)
            ticks["during_block"] += 1

    async def main():
        ticker = asyncio.create_task(other_rollout())
        first = await run_tool(tools, "stuck", "", 0.3, 100, counts)
        # the same tool again, and another tool, while the first call's thread is still blocked
        again, other = await asyncio.gather(
            run_tool(tools, "stuck", "", 0.3, 100, counts), run_tool(tools, "quick", "hi", 5.0, 100, counts)
        )
        done.set()
        await ticker
        return first, again, other

    done = asyncio.Event()
    try:
        first, again, other = asyncio.run(main())
    finally:
        release.set()
    assert first == again == "error: tool stuck took longer than 0.3s"
    assert other == "HI"
    assert ticks["during_block"] >= 5  # the loop kept turning while the tool blocked
    metrics = counts.take()
    assert metrics["agent/tool_timeouts"] == 2.0 and metrics["agent/tool_calls"] == 3.0


def test_tools_that_exit_or_cannot_be_printed_are_tool_errors(tmp_path):
    tools = _tools(tmp_path)
    counts = ToolCounts()

    def run(name):
        return asyncio.run(run_tool(tools, name, "x", 2.0, 100, counts))

    assert run("exits") == "error: tool exits failed: FunctionExited: exit code 3"
    assert run("interrupted") == "error: tool interrupted failed: FunctionExited: exit code KeyboardInterrupt"
    assert run("unprintable") == "error: tool unprintable failed: Unprintable: (its message could not be printed)"
    out = run("loud")
    assert out == "hello" and type(out) is str
    assert counts.take()["agent/tool_errors"] == 3.0


def test_a_tool_that_swallows_its_cancellation_still_times_out(tmp_path):
    tools = _tools(tmp_path)
    counts = ToolCounts()

    async def main():
        loop = asyncio.get_running_loop()
        start = loop.time()
        out = await run_tool(tools, "stubborn", "", 0.2, 100, counts)
        return out, loop.time() - start

    out, took = asyncio.run(main())
    assert out == "error: tool stubborn took longer than 0.2s"
    assert took < 2.0  # the call returns at its deadline, not when the tool (3 s) gives up
    assert counts.take()["agent/tool_timeouts"] == 1.0
