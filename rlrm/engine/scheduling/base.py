"""What a scheduling mode is: a `Scheduler` that trains one step when asked, from the parts it is given.

    scheduler = make_scheduler(mode, run, start_step=0)      # rlrm/engine/scheduling/registry.py
    record = await scheduler.step(k, timer)                  # StepRecord of step k (weights published)
    scheduler.loader_state()                                 # the resume point after the last trained step
    await scheduler.close()

Every mode trains through the same `GRPOStep` (rlrm/engine/step.py) and publishes the new weights
itself (`run.weights.publish`, rlrm/engine/weights.py); a mode's file says only when each of its parts
runs and what overlaps. The trainer turns the record into the step's metrics row (`GRPOStep.finish`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from rlrm.config.schema import Profile
from rlrm.engine.data.example import Example
from rlrm.engine.data.loader import PromptLoader
from rlrm.engine.data.prompts import encode_prompts
from rlrm.engine.metrics.spans import SpanLog
from rlrm.engine.metrics.timing import StepTimer
from rlrm.engine.reward_service import RewardService
from rlrm.engine.step import GRPOStep, StepRecord
from rlrm.engine.weights import PolicyWeights
from rlrm.inference.base import RolloutEngine


class Scheduler(Protocol):
    async def step(self, step: int, timer: StepTimer) -> StepRecord:
        """Train step `step` (1-based), publish its weights as version `step`, and return what it trained."""
        ...

    def loader_state(self) -> dict:
        """The prompt loader's state right after the last trained step's prompts (resume point)."""
        ...

    async def close(self) -> None:
        """Cancel whatever still runs in the background."""
        ...


@dataclass
class PromptBatch:
    examples: list[Example]  # the prompts kept (prompt_too_long: drop leaves some out)
    prompt_ids: list[list[int]]
    dropped: int  # prompts dropped for length


class PromptSource:
    """The loader's next batch of prompts, encoded with the policy's chat template."""

    def __init__(self, loader: PromptLoader, tokenizer: Any, max_prompt_length: int, too_long: str):
        self.loader, self.tokenizer = loader, tokenizer
        self.max_prompt_length, self.too_long = max_prompt_length, too_long

    def take(self) -> PromptBatch:
        examples = self.loader.next_batch()
        ids, kept, dropped = encode_prompts(examples, self.tokenizer, self.max_prompt_length, self.too_long)
        return PromptBatch(kept, ids, dropped)

    def state_dict(self) -> dict:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.loader.load_state_dict(state)


@dataclass(frozen=True)
class RunParts:
    """What a scheduler works with (built once per run by the trainer)."""

    profile: Profile
    prompts: PromptSource
    engine: RolloutEngine
    reward: RewardService
    tokenizer: Any  # the policy's tokenizer (decodes responses for the reward functions)
    grpo: GRPOStep
    weights: PolicyWeights  # the one place the engine gets new weights and their version
    spans: SpanLog  # receives the generate/reward spans recorded in the background
