"""The embedded server's model endpoints: completions, chat completions, SGLang /generate, vLLM /classify."""

from __future__ import annotations

import asyncio
import math
import random
import time
from typing import cast

from rlrm.inference.base import Completion, SamplingParams
from rlrm.launch.server.backends import LeftPadded
from rlrm.launch.server.batcher import ForwardFailed, Overloaded
from rlrm.launch.server.protocol import (
    ChatCompletionRequest,
    ClassifyRequest,
    CompletionRequest,
    GenerateRequest,
    RequestError,
    new_id,
)

RETRY_AFTER_S = "1"


def add_routes(app, cfg, backend) -> None:
    generative = cfg.role.generates
    state = {"inflight": 0}
    respond = json_response_class()  # the model endpoints are Starlette routes: they return a Response

    def post(path: str, model):
        """Register `handler(body)` for POST `path` as a plain Starlette route ahead of FastAPI's own.

        The body is validated with `model` here; FastAPI's per-request dependency solving (path,
        query, header and cookie parameters these endpoints do not have) and route scan are skipped.
        Errors go through the app's handlers as before (RequestValidationError -> 400)."""
        from fastapi.exceptions import RequestValidationError
        from pydantic import ValidationError
        from starlette.routing import Route

        def register(handler):
            async def endpoint(request):
                try:
                    body = model.model_validate_json(await request.body())
                except ValidationError as exc:
                    raise RequestValidationError(exc.errors(include_url=False)) from None
                return await handler(body)

            app.router.routes.insert(0, Route(path, endpoint, methods=["POST"]))
            return handler

        return register

    def need(kind: str) -> None:
        if (kind == "generate") != generative:
            raise RequestError(
                f"this server has role {cfg.role.value!r}; {kind} endpoints are not served here", status=404
            )

    async def generate(prompt_ids: list[int], sampling: SamplingParams, n: int) -> list[Completion]:
        if not prompt_ids:
            raise RequestError("empty prompt: send at least one token of input")
        if len(prompt_ids) + sampling.max_new_tokens > backend.max_len:
            raise RequestError(
                f"prompt has {len(prompt_ids)} tokens; with {sampling.max_new_tokens} new tokens it exceeds "
                f"the model's {backend.max_len}-token context; shorten it or lower max_tokens"
            )
        if state["inflight"] + n > cfg.max_queue:
            raise RequestError(
                "server overloaded: too many requests in flight", status=503, headers={"Retry-After": RETRY_AFTER_S}
            )
        base = sampling.seed if sampling.seed is not None else random.getrandbits(62)
        state["inflight"] += n
        try:
            jobs = [backend.engine.generate(prompt_ids, _with_seed(sampling, base + i)) for i in range(n)]
            return list(await asyncio.gather(*jobs))
        finally:
            state["inflight"] -= n

    def decode(comp: Completion, stop) -> tuple[str, str]:
        text = backend.tokenizer.decode(comp.token_ids, skip_special_tokens=True)
        finish = comp.finish_reason
        for s in [stop] if isinstance(stop, str) else stop or []:
            cut = text.find(s)
            if s and cut >= 0:
                text, finish = text[:cut], "stop"
        return text, finish

    def tokenize(text: str) -> list[int]:
        return list(backend.tokenizer(text, add_special_tokens=False)["input_ids"])

    def usage(prompt_len: int, comps: list[Completion]) -> dict:
        done = sum(len(c.token_ids) for c in comps)
        return {"prompt_tokens": prompt_len, "completion_tokens": done, "total_tokens": prompt_len + done}

    @post("/v1/completions", CompletionRequest)
    async def completions(body: CompletionRequest):
        need("generate")
        _no_stream(body.stream)
        ids = tokenize(body.prompt) if isinstance(body.prompt, str) else check_ids(list(body.prompt), backend, "prompt")
        sampling = _sampling(body, default_max=16)
        comps = await generate(ids, sampling, body.n)
        choices = []
        for i, comp in enumerate(comps):
            text, finish = decode(comp, body.stop)
            if body.echo:
                text = (body.prompt if isinstance(body.prompt, str) else backend.tokenizer.decode(ids)) + text
            logprobs = (
                {"token_logprobs": comp.log_probs, "tokens": _token_strings(backend, comp)} if body.logprobs else None
            )
            choices.append({"index": i, "text": text, "finish_reason": finish, "logprobs": logprobs})
        return respond(
            {
                "id": new_id("cmpl"),
                "object": "text_completion",
                "created": int(time.time()),
                "model": cfg.model_name,
                "choices": choices,
                "usage": usage(len(ids), comps),
            }
        )

    @post("/v1/chat/completions", ChatCompletionRequest)
    async def chat_completions(body: ChatCompletionRequest):
        need("generate")
        _no_stream(body.stream)
        messages = [m.model_dump(include={"role", "content"}) for m in body.messages]
        ids = list(
            backend.tokenizer.apply_chat_template(
                messages,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
                **(body.chat_template_kwargs or {}),
            )
        )
        sampling = _sampling(body, default_max=min(256, max(1, backend.max_len - len(ids))))
        comps = await generate(ids, sampling, body.n)
        choices = []
        for i, comp in enumerate(comps):
            text, finish = decode(comp, body.stop)
            logprobs: dict | None = None
            if body.logprobs:
                logprobs = {
                    "content": [
                        {"token": tok, "logprob": lp, "bytes": None, "top_logprobs": []}
                        for tok, lp in zip(_token_strings(backend, comp), comp.log_probs)
                    ]
                }
            choices.append(
                {
                    "index": i,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish,
                    "logprobs": logprobs,
                }
            )
        return respond(
            {
                "id": new_id("chatcmpl"),
                "object": "chat.completion",
                "created": int(time.time()),
                "model": cfg.model_name,
                "choices": choices,
                "usage": usage(len(ids), comps),
            }
        )

    @post("/generate", GenerateRequest)
    async def generate_native(body: GenerateRequest):
        need("generate")
        _no_stream(body.stream)
        if (body.text is None) == (body.input_ids is None):
            raise RequestError("send exactly one of 'text' or 'input_ids'")
        if body.text is not None:
            batch = [body.text] if isinstance(body.text, str) else body.text
            prompts = [tokenize(t) for t in batch]
            single = isinstance(body.text, str)
        else:
            single = not body.input_ids or isinstance(body.input_ids[0], int)
            if single:
                prompts = [check_ids(list(cast("list[int]", body.input_ids)), backend, "input_ids")]
            else:
                batched = cast("list[list[int]]", body.input_ids)
                prompts = [check_ids(list(x), backend, f"input_ids[{i}]") for i, x in enumerate(batched)]
        params = (
            body.sampling_params if isinstance(body.sampling_params, list) else [body.sampling_params] * len(prompts)
        )
        if len(params) != len(prompts):  # SGLang's batch shape: one sampling_params per prompt, or one for all
            raise RequestError(
                f"{len(prompts)} prompts but {len(params)} sampling_params; send one per prompt or one for all"
            )
        samplings = [
            SamplingParams(
                temperature=sp.temperature,
                top_p=sp.top_p,
                top_k=sp.top_k,
                max_new_tokens=sp.max_new_tokens,
                seed=sp.seed,
                stop_token_ids=sp.stop_token_ids,
            )
            for sp in params
        ]
        results = await asyncio.gather(*(generate(ids, sampling, 1) for ids, sampling in zip(prompts, samplings)))
        outs = []
        for ids, sp, (comp,) in zip(prompts, params, results):
            text, finish = decode(comp, sp.stop)
            meta = {
                "id": new_id("gen"),
                "prompt_tokens": len(ids),
                "completion_tokens": len(comp.token_ids),
                "finish_reason": {"type": finish},
                "weight_version": str(comp.policy_version),  # a string, as SGLang's
            }
            if body.return_logprob:
                meta["output_token_logprobs"] = [[lp, tid, None] for lp, tid in zip(comp.log_probs, comp.token_ids)]
            outs.append({"text": text, "output_ids": comp.token_ids, "meta_info": meta})
        return respond(outs[0] if single else outs)

    @post("/classify", ClassifyRequest)
    async def classify(body: ClassifyRequest):
        need("classify")
        sequences = _classify_inputs(body, backend)
        if body.padding_side == "left":
            sequences = [LeftPadded(s) for s in sequences]
        activation = body.use_activation if body.use_activation is not None else body.activation
        try:
            logits = await backend.batcher.submit(sequences)
        except Overloaded as exc:
            raise RequestError(
                f"server overloaded: {exc}", status=503, headers={"Retry-After": RETRY_AFTER_S}
            ) from None
        except ForwardFailed as exc:  # run alone, it still failed: its input (422) or the server (500)
            if exc.input_error:
                raise RequestError(f"the model cannot score this input: {exc}", status=422) from None
            raise RequestError(f"the model's forward failed: {exc}", status=500) from None
        data = []
        for i, logit in enumerate(logits):
            value = 1.0 / (1.0 + math.exp(-logit)) if (activation is not False and math.isfinite(logit)) else logit
            data.append(
                {"index": i, "label": None, "probs": [value if math.isfinite(value) else None], "num_classes": 1}
            )
        tokens = sum(len(s) for s in sequences)
        return respond(
            {
                "id": new_id("classify"),
                "object": "list",
                "created": int(time.time()),
                "model": cfg.model_name,
                "data": data,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )


def json_response_class():
    """orjson's response when installed (the `serve` extra has it): cheaper per request under load."""
    import importlib.util

    from fastapi.responses import JSONResponse, ORJSONResponse

    return ORJSONResponse if importlib.util.find_spec("orjson") else JSONResponse


def _classify_inputs(body: ClassifyRequest, backend) -> list[list[int]]:
    raw = body.input
    if isinstance(raw, str):
        raw = [raw]
    if not raw:
        raise RequestError("'input' is empty: send a string, a list of strings, or token ids")
    if isinstance(raw[0], int):
        sequences = [check_ids(list(raw), backend, "input")]
    elif isinstance(raw[0], str):
        sequences = [list(backend.tokenizer(t)["input_ids"]) for t in raw]
    else:
        sequences = [check_ids(list(s), backend, f"input[{i}]") for i, s in enumerate(raw)]
    for i, seq in enumerate(sequences):
        if body.truncate_prompt_tokens:
            seq[:] = seq[-body.truncate_prompt_tokens :]
        if not seq:
            raise RequestError(f"input {i} is empty")
        if len(seq) > backend.max_len:
            raise RequestError(
                f"input {i} has {len(seq)} tokens, more than the model's {backend.max_len}; "
                "shorten it or set truncate_prompt_tokens"
            )
    return sequences


def check_ids(ids: list[int], backend, field: str) -> list[int]:
    """`ids`, if every one is a row of the model's embedding; else a 400 naming the first bad one.

    Checked per request before batching: an id out of range makes the batched forward raise (or,
    on a GPU, trip a device-side assert), which would fail every request in the batch.
    """
    if ids and (min(ids) < 0 or max(ids) >= backend.vocab_size):
        pos = next(i for i, t in enumerate(ids) if not 0 <= t < backend.vocab_size)
        raise RequestError(
            f"{field}[{pos}]: token id {ids[pos]} is outside this model's vocabulary (0 <= id < {backend.vocab_size})"
        )
    return ids


def _sampling(body, default_max: int) -> SamplingParams:
    max_new = body.max_completion_tokens or body.max_tokens or default_max
    return SamplingParams(
        temperature=body.temperature, top_p=body.top_p, top_k=body.top_k, max_new_tokens=max_new, seed=body.seed
    )


def _with_seed(sampling: SamplingParams, seed: int) -> SamplingParams:
    from dataclasses import replace

    return replace(sampling, seed=seed)


def _no_stream(stream: bool) -> None:
    if stream:
        raise RequestError("stream=true is not supported by the embedded server; send stream=false")


def _token_strings(backend, comp: Completion) -> list[str]:
    return backend.tokenizer.convert_ids_to_tokens(comp.token_ids)
