"""The legacy DisRM ranks' answers are matched to the call that asked (no ranks spawned: a stand-in outbox)."""

from __future__ import annotations

from rlrm.engine.rewards.fsdp_disrm.config import LegacyConfig
from rlrm.engine.rewards.fsdp_disrm.workers import LegacyWorkerGroup


def test_a_late_answer_to_a_call_that_timed_out_is_never_read_as_the_next_calls():
    # ranks that answered after the trainer gave up on a call left their scores in the shared outbox: the next
    # call read them as its own, the scores of other samples
    import queue

    from rlrm.engine.executor.mailbox import send

    class Alive:
        exitcode = None

    group = LegacyWorkerGroup(LegacyConfig("unused", dtype="fp32", world_size=2, threads=1), spawn=True)
    group._procs, group._outbox = [Alive(), Alive()], queue.Queue()
    for rank in (0, 1):
        send(group._outbox, ("scored", rank, (1, f"late {rank}")))  # call 1 timed out, then its answers came
    for rank in (1, 0):
        send(group._outbox, ("scored", rank, (2, f"call 2 rank {rank}")))
    assert group._collect("scored", 5.0, call=2) == {0: "call 2 rank 0", 1: "call 2 rank 1"}
