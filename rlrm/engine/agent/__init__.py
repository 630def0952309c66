"""Multi-turn rollouts with tools: the calculator, the tool contract and the agent loop (docs/agentic.md)."""
