"""The embedded server's OpenAI endpoints: /v1/completions and /v1/chat/completions (no streaming)."""

from __future__ import annotations

import time

from rlrm.launch.server.endpoints import Endpoints, check_ids, no_stream, sampling_of, token_strings
from rlrm.launch.server.protocol import ChatCompletionRequest, CompletionRequest, new_id


def add_completion_routes(ep: Endpoints) -> None:
    backend, cfg = ep.backend, ep.cfg

    @ep.post("/v1/completions", CompletionRequest)
    async def completions(body: CompletionRequest):
        ep.need("generate")
        no_stream(body.stream)
        ids = (
            ep.tokenize(body.prompt)
            if isinstance(body.prompt, str)
            else check_ids(list(body.prompt), backend, "prompt")
        )
        sampling = sampling_of(body, default_max=16)
        comps = await ep.generate(ids, sampling, body.n)
        choices = []
        for i, comp in enumerate(comps):
            text, finish = ep.decode(comp, body.stop)
            if body.echo:
                text = (body.prompt if isinstance(body.prompt, str) else backend.tokenizer.decode(ids)) + text
            logprobs = (
                {"token_logprobs": comp.log_probs, "tokens": token_strings(backend, comp)} if body.logprobs else None
            )
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
        sampling = sampling_of(body, default_max=min(256, max(1, backend.max_len - len(ids))))
        comps = await ep.generate(ids, sampling, body.n)
        choices = []
        for i, comp in enumerate(comps):
            text, finish = ep.decode(comp, body.stop)
            logprobs: dict | None = None
            if body.logprobs:
                logprobs = {
                    "content": [
                        {"token": tok, "logprob": lp, "bytes": None, "top_logprobs": []}
                        for tok, lp in zip(token_strings(backend, comp), comp.log_probs)
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
