"""Request bodies of the embedded server, in the vLLM / SGLang / OpenAI shapes.

One client speaks to every backend, so these follow the public schemas: OpenAI's
`/v1/completions` and `/v1/chat/completions`, SGLang's native `/generate`, vLLM's `/classify`.
Unknown fields are rejected (a typo must not be silently ignored), except where the public API
itself tolerates extras.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator


class RequestError(Exception):
    """A client mistake (or an overload): answered with `status` and the message."""

    def __init__(self, message: str, status: int = 400, headers: dict | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers or {}


def new_id(prefix: str) -> str:
    """A unique response id: this process's random prefix and a counter (no syscall per request)."""
    return f"{prefix}-{_ID_PREFIX}{next(_ids):08x}"


_ID_PREFIX = uuid.uuid4().hex[:8]
_ids = itertools.count()


class _Body(BaseModel):
    # strict: "5" is not a number, true is not a token id; NaN is "not a finite number", not "> 10"
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class TextPart(BaseModel):
    """One part of a message's content given as a list, as the OpenAI API allows; text is all a judge reads."""

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # OpenAI messages may carry name, tool fields, ...

    role: Literal["system", "user", "assistant", "tool", "developer"]
    # None or absent: an assistant turn that only calls tools (`"content": null, "tool_calls": [...]`, as the
    # OpenAI SDK builds it), rendered as empty text, as vLLM renders it
    content: str | list[TextPart] | None = None

    @property
    def text(self) -> str:
        """The content as one string (a list of text parts joined, as OpenAI-compatible servers join them)."""
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "\n".join(p.text for p in self.content)


class _Sampling(_Body):
    model: str | None = None
    max_tokens: int | None = Field(None, gt=0)
    max_completion_tokens: int | None = Field(None, gt=0)
    temperature: float = Field(1.0, ge=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1)
    n: int = Field(1, ge=1, le=64)
    seed: int | None = Field(None, ge=-(2**63), lt=2**64)  # what a 64-bit generator takes (torch: < 2**64)
    stop: str | list[str] | None = None
    logprobs: bool | int | None = None
    stream: bool = False
    user: str | None = None  # accepted for compatibility: who asked changes nothing
    # not implemented: accepted only at the value that changes nothing, as /generate's (NOT_IMPLEMENTED below)
    frequency_penalty: float | None = None
    presence_penalty: float | None = None

    @field_validator("frequency_penalty", "presence_penalty")
    @classmethod
    def _no_penalty(cls, value, info):
        if value:
            raise ValueError(
                f"{info.field_name}={value:g} is not implemented by the embedded server (an answer as if it had been "
                "applied would be a wrong one): send 0, or serve the model with vLLM"
            )
        return value

    # fields SGLang's router adds to every request it forwards (measured with sglang-router 0.3.2)
    no_stop_trim: bool = False
    ignore_eos: Literal[False] = False
    skip_special_tokens: Literal[True] = True
    return_hidden_states: Literal[False] = False


class CompletionRequest(_Sampling):
    prompt: Union[str, list[int]]
    echo: bool = False

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_prompt(cls, value):
        if isinstance(value, list) and value and all(isinstance(v, (str, list)) for v in value):
            raise ValueError(
                f"a batch of {len(value)} prompts is not served here (OpenAI's and vLLM's list of strings or of "
                "token-id lists): send one prompt per request, as a string or one list of token ids"
            )
        return value


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    top_logprobs: int | None = Field(None, ge=0)
    chat_template_kwargs: dict | None = None
    continue_final_message: Literal[False] = False
    separate_reasoning: bool = True
    stream_reasoning: bool = True


# SGLang's sampling knobs that change what is generated, which the embedded server does not implement: accepted only
# at the value that changes nothing (an answer as if they had been applied would be a wrong one)
NOT_IMPLEMENTED = {
    "min_p": 0.0,
    "ignore_eos": False,
    "n": 1,
    "min_new_tokens": 0,
    "repetition_penalty": 1.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "logit_bias": None,
    "regex": None,
    "json_schema": None,
    "ebnf": None,
    "structural_tag": None,
}


class GenerateSamplingParams(BaseModel):
    model_config = ConfigDict(
        extra="allow", allow_inf_nan=False, strict=True
    )  # SGLang has many knobs; the ones that change nothing here (no_stop_trim, skip_special_tokens, ...) pass

    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1)
    max_new_tokens: int = Field(128, gt=0)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    seed: int | None = Field(None, alias="sampling_seed", ge=-(2**63), lt=2**64)


class GenerateRequest(_Body):
    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: GenerateSamplingParams | list[GenerateSamplingParams] = Field(
        default_factory=GenerateSamplingParams
    )
    return_logprob: bool = False
    stream: bool = False
    rid: str | list[str] | None = None
    # fields SGLang's router adds (sglang-router 0.3.2); accepted, no effect here
    model: str | None = None
    return_text_in_logprobs: bool = False
    log_metrics: bool = True
    return_hidden_states: Literal[False] = False
    background: Literal[False] = False
    no_logs: bool = False
    return_bytes: bool = False
    return_entropy: Literal[False] = False


class ClassifyRequest(_Body):
    model: str | None = None
    input: Union[str, list[str], list[int], list[list[int]]]
    use_activation: bool | None = None
    activation: bool | None = None  # older vLLM name of use_activation
    truncate_prompt_tokens: int | None = Field(None, ge=-1)  # vLLM's: -1 is the model's length
    user: str | None = None
    # rlrm's own: pad the batch on this side (score-invariance checks; vLLM has no such field)
    padding_side: Literal["right", "left"] | None = None
