"""rlrm: launch, benchmark and validate reward setups for LLM reinforcement learning."""

__version__ = "0.1.0"
