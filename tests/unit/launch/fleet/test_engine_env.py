"""The engine environment's crash cause is the root error, not the errors that relayed it."""

from __future__ import annotations

from rlrm.launch.fleet.process import cause_line

ENGINE_CRASH_LOG = """INFO 11-24 [core.py] EngineCore started
(EngineCore_DP0 pid=7) ERROR 11-24 [core.py:940] EngineCore encountered a fatal error.
(EngineCore_DP0 pid=7) ERROR 11-24 [core.py:940] RuntimeError: CPU Generator does not use offset
(APIServer pid=6) ERROR 11-24 [async_llm.py:525] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
(APIServer pid=6) INFO:     Shutting down"""


def test_the_cause_is_the_root_error_not_its_relays():
    assert cause_line(ENGINE_CRASH_LOG) == "RuntimeError: CPU Generator does not use offset"
    assert cause_line("all fine\nINFO done") is None
