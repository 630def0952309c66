"""The scheduler of each mode named in the config (`trainer.mode`, `rlrm train --mode`).

scheduler = make_scheduler("pipeline", run, start_step=0)
"""

from __future__ import annotations

from rlrm.config.schema import MODES
from rlrm.engine.scheduling.base import RunParts, Scheduler
from rlrm.engine.scheduling.fully_async import FullyAsyncScheduler
from rlrm.engine.scheduling.one_step_off import OneStepOffScheduler
from rlrm.engine.scheduling.pipeline import PipelineScheduler
from rlrm.engine.scheduling.stream import StreamScheduler
from rlrm.engine.scheduling.sync import SyncScheduler

SCHEDULERS = {
    "sync": SyncScheduler,
    "stream": StreamScheduler,
    "pipeline": PipelineScheduler,
    "one-step-off": OneStepOffScheduler,
    "fully-async": FullyAsyncScheduler,
}
assert set(SCHEDULERS) == set(MODES), "every mode of rlrm.config.schema.Mode needs a scheduler here"


def make_scheduler(mode: str, run: RunParts, start_step: int, resume: dict | None = None) -> Scheduler:
    """The scheduler of `mode`, whose first step will be `start_step + 1`.

    Args:
        resume: what `loader_state()` returned when the checkpoint being resumed was saved.
    """
    return SCHEDULERS[mode](run, start_step, resume)
