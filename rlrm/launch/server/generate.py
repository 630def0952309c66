"""SGLang's native /generate on the embedded server: text or token ids, one prompt or a batch, per-prompt sampling."""

from __future__ import annotations

from typing import cast

from rlrm.inference.base import SamplingParams
from rlrm.launch.server.endpoints import Endpoints, check_ids, no_stream
from rlrm.launch.server.protocol import NOT_IMPLEMENTED, GenerateRequest, RequestError, new_id


def add_generate_route(ep: Endpoints) -> None:
    backend = ep.backend

    @ep.post("/generate", GenerateRequest)
    async def generate_native(body: GenerateRequest):
        ep.need("generate")
        no_stream(body.stream)
        if (body.text is None) == (body.input_ids is None):
            raise RequestError("send exactly one of 'text' or 'input_ids'")
        if body.text is not None:
            batch = [body.text] if isinstance(body.text, str) else body.text
            prompts = [await ep.tokenize(t) for t in batch]
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
        listed = isinstance(body.sampling_params, list)
        for i, sp in enumerate(params):
            for key, value in (sp.model_extra or {}).items():
                field = f"sampling_params[{i}].{key}" if listed else f"sampling_params.{key}"
                if key == "seed" and value is not None:  # OpenAI's name: passed by, it answered unseeded
                    raise RequestError(f"{field}: /generate's seed is sampling_seed, as in SGLang")
                if key in NOT_IMPLEMENTED and value not in (NOT_IMPLEMENTED[key], None):
                    raise RequestError(
                        f"{field}={value!r} is not implemented by the embedded server, which would answer as if it "
                        "were unset: leave it out, or serve this model with SGLang or vLLM"
                    )
        samplings = [
            SamplingParams(
                temperature=sp.temperature,
                top_p=sp.top_p,
                top_k=sp.top_k,
                max_new_tokens=sp.max_new_tokens,
                seed=sp.seed,
                stop_token_ids=check_ids(
                    list(sp.stop_token_ids), backend, _stop_field(i, isinstance(body.sampling_params, list))
                )
                if sp.stop_token_ids
                else None,
            )
            for i, sp in enumerate(params)
        ]
        results = await ep.generate_batch([(ids, sampling, 1) for ids, sampling in zip(prompts, samplings)])
        outs = []
        for ids, sp, (whole,) in zip(prompts, params, results):
            text, finish, comp = ep.decode(whole, sp.stop)
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
        return ep.respond(outs[0] if single else outs)


def _stop_field(i: int, listed: bool) -> str:
    return f"sampling_params[{i}].stop_token_ids" if listed else "sampling_params.stop_token_ids"
