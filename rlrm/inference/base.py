"""The rollout engine contract: one async call per request, whatever the backend.

    completion = await engine.generate(prompt_ids, SamplingParams(temperature=1.0, seed=7))

Backends batch requests internally (the hf engine gathers queued requests into dynamic
batches; vLLM and SGLang batch continuously), so callers just fire requests concurrently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class EngineClosedError(RuntimeError):
    """The engine was closed while a request was still queued or being generated."""


class RequestFailedAlone(ValueError):
    """A request whose decode raised when it ran alone, while the requests batched with it succeeded: its input
    is to blame (a server answers 422, as for a classify input), not the engine."""

    def __init__(self, cause: Exception):
        detail = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        super().__init__(f"{type(cause).__name__}: {detail}" if detail else type(cause).__name__)
        self.cause = cause


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples; invalid values raise ValueError when the object is made.

    Attributes:
        temperature: logits are divided by it before sampling; 0 means greedy.
        top_p: nucleus mass; keep the fewest best tokens whose probability reaches it (1.0: off).
        top_k: keep the k best tokens, and those tied with the k-th (-1 or 0: off); before top_p, as vLLM and HF.
        max_new_tokens: the most response tokens, EOS included.
        seed: per-request seed: the same request draws the same tokens in any batch (None: the
            engine picks one).
        stop_token_ids: extra token ids that end the response (kept in it), besides the engine's EOS.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 20
    seed: int | None = None
    stop_token_ids: list[int] | None = None

    def __post_init__(self) -> None:
        if not self.temperature >= 0.0:  # also rejects NaN
            raise ValueError(f"temperature must be >= 0 (0: greedy), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            raise ValueError(f"top_k must be -1 (off) or a positive count, got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass
class Completion:
    """One finished request.

    Attributes:
        prompt_ids: the prompt as sent.
        token_ids: the response, with the EOS (or stop) token when it stopped on one.
        log_probs: float32 log-prob of each response token: log_softmax(logits / temperature) before
            top-k/top-p filtering (plain log_softmax when greedy), as the actor computes it.
        finish_reason: "stop" (EOS or a stop token) or "length" (max_new_tokens reached); an agent trajectory
            (rlrm/engine/agent/loop.py) may also end with "max_turns".
        policy_version: the weight version that produced it (see `update_weights`).
        meta: backend extras (the hf engine records the seed it sampled with).
        loss_mask: one 0/1 per response token, 1 on tokens the policy generated, 0 on tokens the caller
            spliced in (tool observations: attended to, never trained on); None: every token was generated.
    """

    prompt_ids: list[int]
    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str
    policy_version: int = 0
    meta: dict = field(default_factory=dict)
    loss_mask: list[int] | None = None


class RolloutEngine(Protocol):
    """What every generation backend offers the trainer and the scheduling modes (nothing else is asked of one).

    The in-process hf engine (rlrm/inference/hf.py) and the engine over rollout servers
    (rlrm/launch/client/rollout_engine.py) implement all of it; an engine with nothing to start or count
    returns at once from `start` and gives `{}` from `take_metrics`.
    """

    # The parameter dtype of the code that scores tokens (torch.dtype or its name), or None when the log-probs come
    # from other code (vLLM/SGLang servers): with the actor's it decides whether old log-probs are recomputed.
    @property
    def dtype(self) -> object: ...

    async def start(self) -> None:
        """Get ready to serve (start or reach servers); called once by the trainer before the first step."""
        ...

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """Generate one response to `prompt_ids`."""
        ...

    def update_weights(self, state_dict: dict, version: int) -> None:
        """Load new policy weights; completions started after this carry `version`."""
        ...

    def take_metrics(self) -> dict:
        """The engine's own rollout/* counters and weight-sync times since the last call (`{}`: none)."""
        ...

    def take_busy_intervals(self) -> list[tuple[float, float]]:
        """(start, end) `time.perf_counter()` of the engine's busy time since the last call (the rollout lane)."""
        ...

    async def close(self) -> None:
        """Stop serving; requests still waiting fail."""
        ...
