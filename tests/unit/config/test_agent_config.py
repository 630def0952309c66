"""rollout.agent: defaults off, bounded turns, known tools only, each bad value one line naming the fix."""

from __future__ import annotations

import pytest

from rlrm.config.agent import KNOWN_TOOLS
from rlrm.config.loader import load_profile
from rlrm.engine.agent.tools import BUILTIN_TOOLS
from rlrm.errors import ConfigError


def test_agent_is_off_by_default_and_set_by_overrides():
    assert load_profile("tiny-rule").rollout.agent.enabled is False
    p = load_profile("tiny-rule", ["rollout.agent.enabled=true", "rollout.agent.max_turns=3"])
    assert (p.rollout.agent.enabled, p.rollout.agent.max_turns, p.rollout.agent.tools) == (True, 3, ["calculator"])


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("rollout.agent.max_turns=0", "rollout.agent.max_turns: max_turns must be between 1 and 64"),
        ("rollout.agent.max_turns=100000", "rollout.agent.max_turns: max_turns must be between 1 and 64"),
        ("rollout.agent.tools=[calculator,search]", "unknown tool(s) search; known tools: calculator"),
        ("rollout.agent.tools=[]", "rollout.agent.tools"),
        ("rollout.agent.tool_timeout_s=0", "rollout.agent.tool_timeout_s"),
        ("rollout.agent.max_observation_chars=-1", "rollout.agent.max_observation_chars"),
        ("rollout.agent.max_turn=3", "did you mean 'rollout.agent.max_turns'"),
    ],
)
def test_bad_agent_settings_are_one_line(override, needle):
    with pytest.raises(ConfigError) as info:
        load_profile("tiny-rule", [override])
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_config_knows_the_engine_tools():
    assert set(KNOWN_TOOLS) == set(BUILTIN_TOOLS)


def test_user_tools_are_named_files_and_functions(tmp_path):
    tool_file = tmp_path / "my_tools.py"
    tool_file.write_text("async def lookup(arguments):\n    return arguments.upper()\n")
    p = load_profile(
        "tiny-rule", [f"rollout.agent.user_tools={{lookup: '{tool_file}:lookup'}}", "rollout.agent.tools=[lookup]"]
    )
    assert p.rollout.agent.user_tools == {"lookup": f"{tool_file.resolve()}:lookup"}
    for override, needle in [
        (
            f"rollout.agent.user_tools={{lookup: '{tmp_path}/none.py:lookup'}}",
            "not 'FILE.py:FUNCTION' with an existing",
        ),
        (f"rollout.agent.user_tools={{lookup: '{tool_file}'}}", "not 'FILE.py:FUNCTION'"),
        (f"rollout.agent.user_tools={{calculator: '{tool_file}:lookup'}}", "other than a built-in tool"),
        ("rollout.agent.tools=[lookup]", "unknown tool(s) lookup; known tools: calculator (add yours under"),
    ]:
        with pytest.raises(ConfigError) as info:
            load_profile("tiny-rule", [override])
        assert needle in str(info.value) and "\n" not in str(info.value), override


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("rollout.agent.call_tag='a b'", "must be a short ASCII name"),
        ("rollout.agent.call_tag='<x>'", "must be a short ASCII name"),
        ("rollout.agent.observation_tag=call", "call_tag and observation_tag are both 'call'"),
    ],
)
def test_bad_tags_are_one_line(override, needle):
    with pytest.raises(ConfigError) as info:
        load_profile("tiny-rule", [override])
    assert needle in str(info.value) and "\n" not in str(info.value)
