"""The embedded server's OpenAI endpoints: /v1/completions and /v1/chat/completions (no streaming)."""

from __future__ import annotations

import time

from rlrm.launch.server.endpoints import Endpoints, check_ids, no_stream, off_loop, sampling_of, token_pieces
from rlrm.launch.server.protocol import ChatCompletionRequest, CompletionRequest, RequestError, new_id

# apply_chat_template's own parameters: set by the server, so not a template variable a request may pass
_TEMPLATE_CALL = frozenset(
    {
        "conversation",
        "tools",
        "documents",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)


def template_kwargs(given: dict | None) -> dict:
    """`chat_template_kwargs`: variables for the template (enable_thinking, ...); one of apply_chat_template's own
    parameters is a 400 naming it (a request never picks the template or how it is tokenized)."""
    taken = sorted(_TEMPLATE_CALL.intersection(given or {}))
    if taken:
        raise RequestError(
            f"chat_template_kwargs: {', '.join(taken)} cannot be set by a request (the server sets "
            "apply_chat_template's own arguments); pass template variables only, such as enable_thinking"
        )
    return dict(given or {})


def prompt_of(tokenizer, messages: list[dict], kwargs: dict) -> list[int]:
    """The chat template applied: the prompt's token ids (a template that raises on these messages is a 400)."""
    try:
        ids = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False, **kwargs
        )
    except Exception as exc:  # noqa: BLE001 - jinja's TemplateError, or what the template's own raise_exception says
        raise RequestError(f"the chat template cannot render these messages: {type(exc).__name__}: {exc}") from None
    return list(ids)


def add_completion_routes(ep: Endpoints) -> None:
    backend, cfg = ep.backend, ep.cfg

    @ep.post("/v1/completions", CompletionRequest)
    async def completions(body: CompletionRequest):
        ep.need("generate")
        no_stream(body.stream)
        ids = (
            await ep.tokenize(body.prompt)
            if isinstance(body.prompt, str)
            else check_ids(list(body.prompt), backend, "prompt")
        )
        # logprobs: 0 is the sampled tokens' log-probs with no alternatives (OpenAI's and vLLM's meaning), not "off"
        with_logprobs = body.logprobs is not None and body.logprobs is not False
        if isinstance(body.logprobs, int) and not isinstance(body.logprobs, bool) and body.logprobs > 0:
            raise RequestError(
                f"logprobs={body.logprobs} (the top alternatives of each token) is not supported by the embedded "
                "server: send logprobs=0 (each sampled token's log-prob), or serve the model with vLLM"
            )
        if with_logprobs and body.echo:
            raise RequestError(
                "echo=true with logprobs is not supported by the embedded server (the prompt's log-probs are not "
                "computed): send one of them, or serve the model with vLLM"
            )
        sampling = sampling_of(body, default_max=16)
        decoded = [ep.decode(comp, body.stop) for comp in await ep.generate(ids, sampling, body.n)]
        comps = [comp for _, _, comp in decoded]  # cut at the stop string: usage and log-probs count what is sent
        choices = []
        for i, (text, finish, comp) in enumerate(decoded):
            if body.echo:
                text = (body.prompt if isinstance(body.prompt, str) else backend.tokenizer.decode(ids)) + text
            logprobs = None
            if with_logprobs:
                pieces = [piece for piece, _ in token_pieces(backend, comp)]
                offsets = [sum(len(p) for p in pieces[:k]) for k in range(len(pieces))]
                logprobs = {
                    "tokens": pieces,
                    "token_logprobs": comp.log_probs,
                    "top_logprobs": None,
                    "text_offset": offsets,
                }
            choices.append({"index": i, "text": text, "finish_reason": finish, "logprobs": logprobs})
        return ep.respond(
            {
                "id": new_id("cmpl"),
                "object": "text_completion",
                "created": int(time.time()),
                "model": cfg.model_name,
                "choices": choices,
                "usage": ep.usage(len(ids), comps),
            }
        )

    @ep.post("/v1/chat/completions", ChatCompletionRequest)
    async def chat_completions(body: ChatCompletionRequest):
        ep.need("generate")
        no_stream(body.stream)
        if body.top_logprobs:
            raise RequestError(
                "top_logprobs is not supported by the embedded server: send logprobs=true alone (each sampled "
                "token's log-prob), or serve the judge with vLLM"
            )
        messages = [{"role": m.role, "content": m.text} for m in body.messages]
        kwargs = template_kwargs(body.chat_template_kwargs)
        size = sum(len(m["content"]) for m in messages)
        ids = await off_loop(size, lambda: prompt_of(backend.tokenizer, messages, kwargs))
        sampling = sampling_of(body, default_max=min(256, max(1, backend.max_len - len(ids))))
        decoded = [ep.decode(comp, body.stop) for comp in await ep.generate(ids, sampling, body.n)]
        comps = [comp for _, _, comp in decoded]  # cut at the stop string: usage and log-probs count what is sent
        choices = []
        for i, (text, finish, comp) in enumerate(decoded):
            logprobs: dict | None = None
            if body.logprobs:
                logprobs = {
                    "content": [
                        {"token": piece, "logprob": lp, "bytes": raw, "top_logprobs": []}
                        for (piece, raw), lp in zip(token_pieces(backend, comp), comp.log_probs)
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
        return ep.respond(
            {
                "id": new_id("chatcmpl"),
                "object": "chat.completion",
                "created": int(time.time()),
                "model": cfg.model_name,
                "choices": choices,
                "usage": ep.usage(len(ids), comps),
            }
        )
