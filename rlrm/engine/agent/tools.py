"""The tool contract, the built-in tools, and the runner that turns every tool outcome into an observation.

    tools = build_tools(["calculator", "lookup"], {"lookup": "my_tools.py:lookup"})   # name -> async tool
    counts = ToolCounts()
    text = await run_tool(tools, "calculator", "2+2", timeout_s=5, max_chars=256, counts=counts)   # "4"
    counts.take()    # {"agent/tool_calls": 1.0, "agent/tool_errors": 0.0, ...}

A user tool is an `async def tool(arguments: str) -> str` (or `-> tuple[str, float]`: text and a reward),
registered by name in a dict. The runner
never lets a tool end a rollout: a raise (SystemExit and KeyboardInterrupt included), a run past `timeout_s`,
a result over `max_chars` (truncated to it) and an unknown tool name all become an observation the policy
reads, and each is counted under its own `agent/*` metric so a run shows how often its tools misbehave.

A user tool runs on an event loop of its own (rlrm/engine/rewards/side_loop.py), not on the loop that runs the
rollouts: an `async def` that blocks inside (`time.sleep`, `requests.get`, a CPU loop) would otherwise stall
every trajectory, and no timeout on that loop could fire. The caller's loop waits for the result with the
deadline; a loop that a tool blocked is given up after `TOOL_LOOP_GRACE_S` and the next call gets a fresh one.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
import sys
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from rlrm.engine.agent.calculator import calculator
from rlrm.engine.rewards.base import is_score
from rlrm.engine.rewards.side_loop import SideLoop
from rlrm.engine.rewards.threads import being_cancelled, cancelled_error
from rlrm.errors import ConfigError
from rlrm.user_code import import_file

Tool = Callable[[str], Awaitable[str]]
BUILTIN_TOOLS: dict[str, Tool] = {"calculator": calculator}
COUNTERS = (
    "tool_calls",
    "tool_errors",
    "tool_timeouts",
    "truncated_observations",
    "unknown_tools",
    "malformed_calls",
    "version_restarts",  # a trajectory started over because new weights landed mid-way (loop.py)
)
# after a timed-out call, how long a user tool's loop may take to run a no-op before it is taken as blocked
# and replaced; a healthy loop runs one in well under a millisecond
TOOL_LOOP_GRACE_S = 1.0


def build_tools(names: list[str], user_tools: dict[str, str] | None = None) -> dict[str, Tool]:
    """The tools named in `names`: built-in, or loaded from `user_tools` (NAME -> 'FILE.py:FUNCTION').

    Raises:
        ValueError: a name that is neither (naming the known ones).
        ConfigError: a user tool file that does not import, or no `async def FUNCTION` in it.
    """
    user_tools = user_tools or {}
    unknown = [n for n in names if n not in BUILTIN_TOOLS and n not in user_tools]
    if unknown:
        known = [*sorted(BUILTIN_TOOLS), *user_tools]
        raise ValueError(f"unknown tool(s) {', '.join(unknown)}; known tools: {', '.join(known)}")
    return {n: BUILTIN_TOOLS[n] if n in BUILTIN_TOOLS else load_user_tool(n, user_tools[n]) for n in names}


def load_user_tool(name: str, spec: str) -> Tool:
    """The `async def FUNCTION(arguments: str) -> str` that `spec` ('FILE.py:FUNCTION') names."""
    path, _, function = spec.rpartition(":")
    where = f"rollout.agent.user_tools.{name}"
    module = import_file(path, f"rlrm_user_tool_{name}", f"{where}: {path}")
    fn = getattr(module, function, None)
    if not inspect.iscoroutinefunction(fn):
        raise ConfigError(f"{where}: {path} has no `async def {function}(arguments: str) -> str`; define one")
    side = SideLoop(name, grace_s=TOOL_LOOP_GRACE_S, kind="tool")

    @functools.wraps(fn)
    async def on_side_loop(arguments: str):
        return await side.call(fn, arguments)

    return on_side_loop


@dataclass
class ToolCounts:
    """How tool calls went since the last `take` (one instance per engine or per step)."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))

    def add(self, key: str) -> None:
        self.counts[key] += 1

    def take(self) -> dict[str, float]:
        """The counters as `agent/*` metrics, then zero them."""
        out = {f"agent/{k}": float(v) for k, v in self.counts.items()}
        self.counts = dict.fromkeys(COUNTERS, 0)
        return out


async def run_tool(
    tools: dict[str, Tool],
    name: str,
    arguments: str,
    timeout_s: float,
    max_chars: int,
    counts: ToolCounts,
    rewards: list[float] | None = None,
    delay_s: float = 0.0,
) -> str:
    """Run tool `name` on `arguments`; whatever happens, the text the policy is shown (counted in `counts`).

    A tool's own "error: ..." answer (the calculator's division by zero) is counted as a tool error too.
    A tool may answer `(text, reward)`, as verl's tools return a reward with their response: the reward is
    appended to `rewards` (the trajectory's `extra_info["tool_rewards"]`, which the reward function reads).
    `delay_s` (rollout.agent.inject) is slept before the tool runs, inside its timeout: a delay past
    `timeout_s` is a timed-out call like any other.
    """
    counts.add("tool_calls")
    tool = tools.get(name)
    if tool is None:
        counts.add("unknown_tools")
        return f"error: unknown tool {name!r}; tools: {', '.join(sorted(tools))}"[
            :max_chars
        ]  # the name is the policy's
    try:
        result = await _wait_for(_delayed(tool, arguments, delay_s), timeout_s)
    except asyncio.TimeoutError:  # the deadline's only: what the tool raised itself comes as ToolRaised
        counts.add("tool_timeouts")
        return f"error: tool {name} took longer than {timeout_s:g}s"[:max_chars]
    except ToolRaised as raised:  # a user tool may raise anything; the policy sees it, the run goes on
        counts.add("tool_errors")
        return f"error: tool {name} failed: {_describe(raised.error)}"[:max_chars]
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], str):
        result, reward = result
        if isinstance(reward, bool) or not is_score(reward) or not math.isfinite(float(reward)):
            counts.add("tool_errors")
            return f"error: tool {name} returned the reward {reward!r}, not a finite number"[:max_chars]
        if rewards is not None:
            rewards.append(float(reward))  # a numpy scalar or a 0-d tensor too, as a reward function's score
    if not isinstance(result, str):
        counts.add("tool_errors")
        return f"error: tool {name} returned {type(result).__name__}, not str"[:max_chars]
    result = str.__str__(result)  # a str subclass's own methods never run past here: plain text only
    if result.startswith("error:"):
        counts.add("tool_errors")
    if len(result) > max_chars:
        counts.add("truncated_observations")
        result = result[:max_chars]
    return result


def _describe(exc: BaseException) -> str:
    """`Type: message`, even for an exception whose `__str__` raises."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - the user's __str__ may raise anything
        text = "(its message could not be printed)"
    return f"{type(exc).__name__}: {text}"


class ToolRaised(Exception):
    """What a tool raised, apart from the runner's own deadline: a tool's own TimeoutError (its HTTP client gave
    up) is the builtin one, which is asyncio.TimeoutError on Python 3.11, and read as the deadline it told of a
    wait that never happened; a CancelledError of a task it awaited would end the whole trajectory."""

    def __init__(self, error: BaseException):
        super().__init__()  # its text is read by _describe, which survives one that cannot be printed
        self.error = error


async def _wait_for(coro, timeout_s: float):
    """`asyncio.wait_for(coro, timeout_s)`; on Python 3.10, `_wait_for_task`."""
    if sys.version_info < (3, 11):
        return await _wait_for_task(coro, timeout_s)
    return await asyncio.wait_for(coro, timeout=timeout_s)


async def _wait_for_task(coro, timeout_s: float):
    """`asyncio.wait_for` for Python 3.10, where `_delayed` cannot tell a tool's own CancelledError from its task's
    cancellation (no Task.cancelling): this tells it at the task's edge. The caller cancelled, or the deadline past:
    the task is cancelled, its cleanup awaited, and CancelledError or TimeoutError raised (its result, if it ended
    with one all the same, as wait_for); the task ended cancelled by neither: the tool's own, ToolRaised."""
    task = asyncio.ensure_future(coro)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    except asyncio.CancelledError:  # the caller's own cancellation
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    if not done:  # the deadline
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if task.cancelled():
            raise asyncio.TimeoutError
    elif task.cancelled():
        raise ToolRaised(cancelled_error(task))
    return task.result()


async def _delayed(tool: Tool, arguments: str, delay_s: float):
    """`tool(arguments)` after sleeping `delay_s` on the event loop (the injected tool latency); what the tool
    raises comes as ToolRaised, a cancellation of this task itself as it is."""
    if delay_s > 0:
        await asyncio.sleep(delay_s)
    try:
        return await tool(arguments)
    except asyncio.CancelledError as exc:
        if being_cancelled():  # the deadline's (wait_for) or the run's: this task's own
            raise
        raise ToolRaised(exc) from None
    except Exception as exc:
        raise ToolRaised(exc) from None
