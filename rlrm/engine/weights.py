"""Where the policy's weights move: from the actor to the rollout engine, as a numbered version.

    weights = PolicyWeights(actor, engine)      # version 0: the weights the run started from
    weights.publish(step, timer)                # after the update of step `step`: the engine serves them now
    weights.version                             # what the engine holds (the rollouter launches by it)

Each scheduling mode calls `publish` where it decides that weights move (after its update, before the
next batch may be generated with them); the trainer calls it once more on resume, to give the engine the
checkpoint's weights under the checkpoint's step. It is the only place a policy version is set.
"""

from __future__ import annotations

from contextlib import nullcontext

from rlrm.engine.actor.base import PolicyActor
from rlrm.engine.metrics.timing import StepTimer
from rlrm.inference.base import RolloutEngine


class PolicyWeights:
    """The actor's weights as the rollout engine holds them.

    Args:
        actor: holds the trained weights (`policy_state_dict`).
        engine: receives them (`update_weights`: a load in process, a weight sync over HTTP for servers).
    """

    def __init__(self, actor: PolicyActor, engine: RolloutEngine):
        self.actor, self.engine = actor, engine
        self.version = 0

    def publish(self, version: int, timer: StepTimer | None = None) -> None:
        """Hand the actor's current weights to the engine as `version` (timed as `timing_s/update_weights`).

        Blocking (an HTTP weight sync for rollout servers): overlapping modes call it in their trainer thread.
        """
        with timer("update_weights") if timer is not None else nullcontext():
            self.engine.update_weights(self.actor.policy_state_dict(), version=version)
        self.version = version
