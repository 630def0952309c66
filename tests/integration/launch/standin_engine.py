"""A STAND-IN for a vLLM or SGLang policy server (neither can run on this machine): their HTTP shapes only.

    python tests/integration/launch/standin_engine.py --kind vllm --port 8000 --log calls.jsonl [--fail-reload] [--stale]

It answers the requests rlrm's rollout engine sends (vLLM: /v1/completions with token ids,
/collective_rpc reload_weights, /reset_prefix_cache; SGLang: /generate, /update_weights_from_disk,
/get_model_info, and the distributed path: /init_weights_update_group, /update_weights_from_distributed,
/destroy_weights_update_group) in the shapes their documentation gives, and refuses what they refuse of
those (a top_k SGLang's SamplingParams.verify refuses: 0 or below -1; vLLM 0.32's: below -1). The SGLang kind also
serves a DisRM's native POST /classify as SGLang does (python/sglang/srt/entrypoints/http_server.py
`classify_request(obj: EmbeddingReqInput)`): `input_ids` (one list, or a list of lists) or `text`, answered
{"embedding": [score], "meta_info": {...}} (a list of those for a batch), the score a deterministic function of
the ids standing in for a sequence classifier's raw logit; neither given is a 400. It samples nothing real (a
deterministic function of prompt and seed), and appends every call to `--log` as one JSON line, with
whether the weights folder it was told to load held a safetensors file at that moment, and for a
distributed update the sum of every tensor it received (it joins the trainer's gloo group for real:
without a member the trainer's broadcast would wait).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse


def build(
    kind: str, log: Path, fail_reload: bool, stale: bool, token_delay: float = 0.0, dev_mode: bool = True
) -> FastAPI:
    app = FastAPI()
    state = {"version": "default", "loaded": 0}

    def record(path: str, body: dict) -> None:
        folder = (body.get("kwargs") or {}).get("weights_path") or body.get("model_path")
        entry = {"path": path, "body": body}
        if folder:
            entry["had_weights"] = (Path(folder) / "model.safetensors").is_file()
        with log.open("a") as f:
            f.write(json.dumps(entry) + "\n")

    def tokens(prompt: list[int], seed: int, n: int) -> list[int]:
        return [(sum(prompt) * 31 + seed * 7 + i) % 400 + 10 for i in range(n)]

    @app.get("/health")
    async def health():
        return PlainTextResponse("ok")

    if kind == "vllm":

        @app.post("/v1/completions")
        async def completions(request: Request):
            body = await request.json()
            record("/v1/completions", body)
            top_k = body.get("top_k")
            if top_k is not None and top_k < -1:  # vLLM 0.32's SamplingParams._verify_args
                message = f"top_k must be 0 (disable), or at least 1, got {top_k}."
                return JSONResponse({"error": {"message": message, "type": "BadRequestError", "code": 400}}, 400)
            ids = tokens(body["prompt"], body.get("seed") or 0, body["max_tokens"])
            if token_delay:  # token by token, each naming the weights loaded when it is sampled: 1000 + version
                ids = []
                for _ in range(body["max_tokens"]):
                    ids.append(1000 + state["loaded"])
                    await asyncio.sleep(token_delay)
            return {
                "id": "cmpl-standin",
                "object": "text_completion",
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "text": "x" * len(ids),
                        "token_ids": ids,
                        "finish_reason": "length",
                        "logprobs": {
                            "token_logprobs": [-0.1 * (i + 1) for i in range(len(ids))],
                            "tokens": ["x"] * len(ids),
                        },
                    }
                ],
            }

        async def collective_rpc(request: Request):
            body = await request.json()
            record("/collective_rpc", body)
            if fail_reload:
                return JSONResponse({"error": {"message": "reload_weights failed: shape mismatch (stand-in)"}}, 500)
            state["loaded"] = _version_in(Path(body["kwargs"]["weights_path"]) / "model.safetensors")
            return {"results": [None]}

        if dev_mode:  # vLLM registers its development routes only with VLLM_SERVER_DEV_MODE=1
            app.post("/collective_rpc")(collective_rpc)

        @app.post("/reset_prefix_cache")
        async def reset_prefix_cache(request: Request):
            record("/reset_prefix_cache", {})
            return PlainTextResponse("")
    else:

        @app.post("/generate")
        async def generate(request: Request):
            body = await request.json()
            record("/generate", body)
            batch = isinstance(body["input_ids"][0], list)  # SGLang's batch form: lists of prompts and of params
            prompts = body["input_ids"] if batch else [body["input_ids"]]
            params = body.get("sampling_params", {})
            params = params if isinstance(params, list) else [params] * len(prompts)
            for sp in params:  # SGLang's SamplingParams: -1 becomes "all tokens", then verify()
                top_k = sp.get("top_k", -1)
                if top_k != -1 and top_k < 1:
                    message = f"top_k must be -1 (disable) or at least 1, got {top_k}."
                    return JSONResponse({"error": {"message": message}}, 400)  # SGLang's _create_error_response
            outs = []
            for prompt, sp in zip(prompts, params):
                ids = tokens(prompt, sp.get("sampling_seed") or 0, sp.get("max_new_tokens", 8))
                meta = {
                    "id": "standin",
                    "finish_reason": {"type": "length", "length": len(ids)},
                    "prompt_tokens": len(prompt),
                    "completion_tokens": len(ids),
                    "output_token_logprobs": [[-0.25, t, None] for t in ids],
                    "weight_version": "default" if stale else state["version"],
                }
                outs.append({"text": "x", "output_ids": ids, "meta_info": meta})
            return outs if batch else outs[0]

        @app.post("/update_weights_from_disk")
        async def update_weights_from_disk(request: Request):
            body = await request.json()
            record("/update_weights_from_disk", body)
            if fail_reload:
                return {
                    "success": False,
                    "message": "Failed to update weights: shape mismatch (stand-in)",
                    "num_paused_requests": 0,
                }
            state["version"] = body.get("weight_version") or state["version"]
            return {"success": True, "message": "Succeeded to update model weights.", "num_paused_requests": 0}

        groups = {}

        @app.post("/init_weights_update_group")
        async def init_weights_update_group(request: Request):
            import asyncio

            from rlrm.launch.common.weight_group import join_group

            body = await request.json()
            record("/init_weights_update_group", body)
            groups[body["group_name"]] = await asyncio.to_thread(
                join_group,
                body["master_address"],
                body["master_port"],
                body["rank_offset"],
                body["world_size"],
                body["group_name"],
                body["backend"],
                60.0,
            )
            return {"success": True, "message": "Succeeded to initialize custom process group."}

        @app.post("/update_weights_from_distributed")
        async def update_weights_from_distributed(request: Request):
            import asyncio

            import torch

            body = await request.json()
            group = groups[body["group_name"]]

            def receive() -> list[float]:
                sums = []
                for dtype, shape in zip(body["dtypes"], body["shapes"]):
                    buffer = torch.empty(shape, dtype=getattr(torch, dtype))
                    group.broadcast(buffer)
                    sums.append(buffer.double().sum().item())
                return sums

            sums = await asyncio.to_thread(receive)
            record("/update_weights_from_distributed", {**body, "received_sums": sums})
            state["version"] = body.get("weight_version") or state["version"]
            return {"success": True, "message": "Succeeded to update parameter online."}

        @app.post("/destroy_weights_update_group")
        async def destroy_weights_update_group(request: Request):
            body = await request.json()
            record("/destroy_weights_update_group", body)
            group = groups.pop(body["group_name"], None)
            if group is not None:
                group.close()
            return {"success": True, "message": "Succeeded to destroy custom process group."}

        @app.post("/classify")
        async def classify(request: Request):
            body = await request.json()
            record("/classify", body)
            ids, text = body.get("input_ids"), body.get("text")
            if ids is None and text is None:
                return JSONResponse({"error": {"message": "Either text or input_ids should be provided."}}, 400)
            if ids is None:
                ids = [[ord(c) for c in t] for t in text] if isinstance(text, list) else [ord(c) for c in text]
            batch = bool(ids) and isinstance(ids[0], list)

            def answer(seq: list[int]) -> dict:
                score = (sum(seq) * 31 + len(seq)) % 97 / 8.0 - 6.0  # a raw logit, any sign
                return {"embedding": [score], "meta_info": {"id": "standin", "prompt_tokens": len(seq)}}

            return [answer(seq) for seq in ids] if batch else answer(ids)

        @app.get("/get_model_info")
        async def get_model_info():
            return {
                "model_path": "standin",
                "tokenizer_path": "standin",
                "is_generation": True,
                "weight_version": state["version"],
            }

    return app


def _version_in(file: Path) -> int:
    """The rlrm_version a weights file was written with (rlrm/inference/weight_files.py), 0 for other files."""
    import struct

    if not file.is_file():
        return 0
    with file.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return int(header.get("__metadata__", {}).get("rlrm_version", 0))


if __name__ == "__main__":
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=("vllm", "sglang"), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--fail-reload", action="store_true")
    parser.add_argument(
        "--stale", action="store_true", help="always report SGLang's default version (a restarted replica)"
    )
    parser.add_argument(
        "--token-delay", type=float, default=0.0, help="vllm: sample token by token, each 1000 + the loaded version"
    )
    parser.add_argument(
        "--no-dev-mode", action="store_true", help="vllm: no /collective_rpc (VLLM_SERVER_DEV_MODE off)"
    )
    args = parser.parse_args()
    uvicorn.run(
        build(args.kind, Path(args.log), args.fail_reload, args.stale, args.token_delay, not args.no_dev_mode),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
    )
