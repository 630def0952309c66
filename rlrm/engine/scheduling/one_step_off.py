"""one-step-off mode: generation (and scoring) of batch k+1 runs while batch k is trained.

Stream's step on a rollouter that may run one policy version ahead: batch k+1 is launched as soon
as the trainer holds version k-1, so its samples come from a policy one update older than the one
they train (the ratio uses the engine's own log-probs, the behaviour policy's). Step k's reward/* counters,
failure budget and reward.on_failure=fail stop are batch k's alone, as in sync (rlrm/engine/scheduling/overlap.py).
"""

from __future__ import annotations

from rlrm.engine.scheduling.base import RunParts
from rlrm.engine.scheduling.stream import StreamScheduler


class OneStepOffScheduler(StreamScheduler):
    off_policy = True

    @staticmethod
    def max_ahead(run: RunParts) -> int:
        return 1
