"""An example user tool for `rollout.agent.user_tools` (docs/agentic.md): a capital -> country lookup.

    rollout.agent: {enabled: true, tools: [calculator, lookup], user_tools: {lookup: examples/tools/lookup.py:lookup}}

The policy calls it as `<call>lookup paris</call>` and reads `<obs>France</obs>`.
"""

COUNTRIES = {"paris": "France", "rome": "Italy", "madrid": "Spain", "berlin": "Germany"}


async def lookup(arguments: str) -> str:
    """The country whose capital `arguments` names, or an "error: ..." the policy reads."""
    return COUNTRIES.get(arguments.strip().lower(), f"error: no capital named {arguments.strip()!r}")
