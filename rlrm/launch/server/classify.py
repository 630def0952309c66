"""vLLM's /classify on the embedded server: a DisRM's score per input, batched across requests (batcher.py)."""

from __future__ import annotations

import math
import time
from typing import cast

from rlrm.launch.server.backends import LeftPadded
from rlrm.launch.server.batcher import ForwardFailed, Overloaded
from rlrm.launch.server.endpoints import RETRY_AFTER_S, Endpoints, check_ids, off_loop
from rlrm.launch.server.protocol import ClassifyRequest, RequestError, new_id


def add_classify_route(ep: Endpoints) -> None:
    backend, cfg = ep.backend, ep.cfg

    @ep.post("/classify", ClassifyRequest)
    async def classify(body: ClassifyRequest):
        ep.need("classify")
        sequences = await _classify_inputs(body, backend, cfg.max_queue)
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
        return ep.respond(
            {
                "id": new_id("classify"),
                "object": "list",
                "created": int(time.time()),
                "model": cfg.model_name,
                "data": data,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )


async def _classify_inputs(body: ClassifyRequest, backend, max_queue: int) -> list[list[int]]:
    raw = body.input
    if isinstance(raw, str):
        raw = [raw]
    if not raw:
        raise RequestError("'input' is empty: send a string, a list of strings, or token ids")
    count = 1 if isinstance(raw[0], int) else len(raw)
    if count > max_queue:  # never admitted, whatever else is queued: not worth a retry
        raise RequestError(
            f"{count} inputs in one request; this server takes at most {max_queue} (--max-queue): split the request"
        )
    if isinstance(raw[0], int):
        sequences = [check_ids(list(raw), backend, "input")]
    elif isinstance(raw[0], str):
        texts = cast("list[str]", raw)
        sequences = await off_loop(
            sum(map(len, texts)), lambda: [list(backend.tokenizer(t)["input_ids"]) for t in texts]
        )
    else:
        sequences = [check_ids(list(s), backend, f"input[{i}]") for i, s in enumerate(raw)]
    keep = body.truncate_prompt_tokens
    if keep == 0:
        raise RequestError("truncate_prompt_tokens=0 would score nothing; give N >= 1 (the last N tokens) or -1")
    if keep == -1:  # vLLM's: the model's length
        keep = backend.max_len
    for i, seq in enumerate(sequences):
        if keep:
            seq[:] = seq[-keep:]
        if not seq:
            raise RequestError(f"input {i} is empty")
        if len(seq) > backend.max_len:
            raise RequestError(
                f"input {i} has {len(seq)} tokens, more than the model's {backend.max_len}; "
                "shorten it or set truncate_prompt_tokens"
            )
    return sequences
