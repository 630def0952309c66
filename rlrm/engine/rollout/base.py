"""The rollout engine contract: one async call per request, whatever the backend.

    completion = await engine.generate(prompt_ids, SamplingParams(temperature=1.0, seed=7))

Backends batch requests internally (the hf engine gathers queued requests into dynamic
batches; vLLM and SGLang batch continuously), so callers just fire requests concurrently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = -1  # -1: off
    max_new_tokens: int = 20
    seed: int | None = None  # per-request seed: the same request draws the same tokens in any batch


@dataclass
class Completion:
    prompt_ids: list[int]
    token_ids: list[int]  # the response, with the EOS token when it stopped on one
    log_probs: list[float]  # log-prob of each response token under the sampling temperature
    finish_reason: str  # "stop" (EOS) or "length" (max_new_tokens)
    policy_version: int = 0  # the weight version that produced it
    meta: dict = field(default_factory=dict)


class RolloutEngine(Protocol):
    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion: ...

    def update_weights(self, state_dict: dict, version: int) -> None: ...

    async def close(self) -> None: ...
