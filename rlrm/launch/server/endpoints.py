"""What the embedded server's model endpoints share: the backend, the bound on requests in flight, decoding, and
registration as plain Starlette routes.

    ep = Endpoints(app, cfg, backend)
    @ep.post("/v1/completions", CompletionRequest)
    async def completions(body): ... await ep.generate(ids, sampling, n) ... return ep.respond({...})

The endpoints themselves: completions.py (OpenAI completions and chat), generate.py (SGLang's /generate),
classify.py (vLLM's /classify); routes.py adds them all.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import random
from dataclasses import replace

from rlrm.inference.base import Completion, RequestFailedAlone, SamplingParams
from rlrm.launch.server.protocol import RequestError

RETRY_AFTER_S = "1"
# text longer than this is tokenized (or put through the chat template) in a worker thread: a 5 MB prompt takes
# seconds, which on the event loop would stall every other request and /health; shorter text costs less inline
THREAD_ABOVE_CHARS = 32_768
# how often a generation asks whether its client is still there (a client that hung up frees its queued work)
DISCONNECT_POLL_S = 0.5
_request: contextvars.ContextVar = contextvars.ContextVar("rlrm_server_request", default=None)
_log = logging.getLogger("rlrm.server")


class Endpoints:
    def __init__(self, app, cfg, backend):
        self.app, self.cfg, self.backend = app, cfg, backend
        self.generative = cfg.role.generates
        self.inflight = 0
        self.respond = json_response_class()  # the model endpoints are Starlette routes: they return a Response

    def post(self, path: str, model):
        """Register `handler(body)` for POST `path` as a plain Starlette route ahead of FastAPI's own.

        The body is validated with `model` here; FastAPI's per-request dependency solving (path,
        query, header and cookie parameters these endpoints do not have) and route scan are skipped.
        Errors go through the app's handlers as before (RequestValidationError -> 400). Any other exception is a
        500 in the same JSON shape, logged once, and the connection stays open for the client's next request (an
        exception left to the server closes it under the client, which then fails a request it had not sent
        yet). A client that hangs up while sending its body is not an error."""
        from fastapi.exceptions import RequestValidationError
        from pydantic import ValidationError
        from starlette.requests import ClientDisconnect
        from starlette.responses import Response
        from starlette.routing import Route

        def register(handler):
            async def endpoint(request):
                try:
                    raw = await request.body()
                except ClientDisconnect:
                    return Response(status_code=400)  # nobody reads it
                try:
                    body = model.model_validate_json(raw)
                except ValidationError as exc:
                    raise RequestValidationError(exc.errors(include_url=False)) from None
                _request.set(request)
                try:
                    return await handler(body)
                except RequestError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a bug or a fault below: answered, logged, not raised
                    _log.exception("%s failed", path)
                    raise RequestError(f"internal error: {type(exc).__name__}: {exc}", status=500) from None

            self.app.router.routes.insert(0, Route(path, endpoint, methods=["POST"]))
            return handler

        return register

    def need(self, kind: str) -> None:
        if (kind == "generate") != self.generative:
            raise RequestError(
                f"this server has role {self.cfg.role.value!r}; {kind} endpoints are not served here", status=404
            )

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, n: int) -> list[Completion]:
        """`n` completions of one prompt (seeds `seed`, `seed + 1`, ...)."""
        return (await self.generate_batch([(prompt_ids, sampling, n)]))[0]

    async def generate_batch(self, items: list[tuple[list[int], SamplingParams, int]]) -> list[list[Completion]]:
        """Completions of several prompts, (ids, sampling, n) each: all checked, and admitted together or refused
        together (a request never holds half its prompts in the queue when it is turned away). Its queued work
        is dropped when its client hangs up."""
        backend, cfg = self.backend, self.cfg
        for i, (prompt_ids, sampling, _) in enumerate(items):
            which = f"prompt {i}" if len(items) > 1 else "prompt"
            if not prompt_ids:
                raise RequestError(f"empty {which}: send at least one token of input")
            if len(prompt_ids) + sampling.max_new_tokens > backend.max_len:
                raise RequestError(
                    f"{which} has {len(prompt_ids)} tokens; with {sampling.max_new_tokens} new tokens it exceeds "
                    f"the model's {backend.max_len}-token context; shorten it or lower max_tokens"
                )
        total = sum(n for _, _, n in items)
        if total > cfg.max_queue:  # never admitted, whatever else is in flight: not worth a retry
            raise RequestError(
                f"{total} sequences in one request; this server takes at most {cfg.max_queue} (--max-queue): "
                "split the request"
            )
        if self.inflight + total > cfg.max_queue:
            raise RequestError(
                "server overloaded: too many requests in flight", status=503, headers={"Retry-After": RETRY_AFTER_S}
            )
        jobs = []
        for prompt_ids, sampling, n in items:
            base = sampling.seed if sampling.seed is not None else random.getrandbits(62)
            jobs += [
                asyncio.ensure_future(backend.engine.generate(prompt_ids, with_seed(sampling, base + i)))
                for i in range(n)
            ]
        self.inflight += total
        try:
            done = await _while_connected(asyncio.gather(*jobs))
        except RequestFailedAlone as exc:  # its decode failed alone, its batch-mates' did not: its input's fault
            raise RequestError(f"the model cannot generate for this input: {exc}", status=422) from None
        except ValueError as exc:  # the engine's own checks of one request's input (rlrm.inference.hf)
            raise RequestError(str(exc)) from None
        finally:
            self.inflight -= total
            for job in jobs:  # one failed, or the client left: the rest would decode for nobody
                if not job.done():
                    job.cancel()
        out, at = [], 0
        for _, _, n in items:
            out.append(done[at : at + n])
            at += n
        return out

    def decode(self, comp: Completion, stop) -> tuple[str, str, Completion]:
        """The response's text, its finish reason and the completion, cut at the first `stop` string: the text
        ends before it, the token ids and log-probs with the token that completes it (as with EOS), so text, ids,
        log-probs and usage tell of the same response (they kept every token up to EOS before)."""
        tokenizer = self.backend.tokenizer
        text = tokenizer.decode(comp.token_ids, skip_special_tokens=True)
        stops = [s for s in ([stop] if isinstance(stop, str) else stop or []) if s]
        found = [text.find(s) for s in stops if s in text]
        if not found:
            return text, comp.finish_reason, comp
        # the fewest tokens whose text holds a stop string (a longer prefix holds it too): a binary search
        ids, low, high = comp.token_ids, 1, len(comp.token_ids)
        while low < high:
            mid = (low + high) // 2
            head = tokenizer.decode(ids[:mid], skip_special_tokens=True)
            low, high = (low, mid) if any(s in head for s in stops) else (mid + 1, high)
        mask = comp.loss_mask[:low] if comp.loss_mask is not None else None
        kept = replace(comp, token_ids=ids[:low], log_probs=comp.log_probs[:low], finish_reason="stop", loss_mask=mask)
        return text[: min(found)], "stop", kept

    async def tokenize(self, text: str) -> list[int]:
        return await off_loop(
            len(text), lambda: list(self.backend.tokenizer(text, add_special_tokens=False)["input_ids"])
        )

    @staticmethod
    def usage(prompt_len: int, comps: list[Completion]) -> dict:
        done = sum(len(c.token_ids) for c in comps)
        return {"prompt_tokens": prompt_len, "completion_tokens": done, "total_tokens": prompt_len + done}


async def off_loop(size: int, work):
    """`work()`, in a worker thread when `size` (characters) is over THREAD_ABOVE_CHARS, else here."""
    return await asyncio.to_thread(work) if size > THREAD_ABOVE_CHARS else work()


async def _while_connected(gathered: asyncio.Future):
    """The gathered result, unless this request's client hangs up first: then the handler ends, and the caller
    cancels the generations (the engine drops them from its queue, and a batch whose callers all left stops)."""
    request = _request.get()
    if request is None:
        return await gathered
    while True:
        done, _ = await asyncio.wait({gathered}, timeout=DISCONNECT_POLL_S)
        if done:
            return gathered.result()
        if await request.is_disconnected():
            raise RequestError("the client closed the connection", status=499)


@functools.cache
def json_response_class():
    """A JSON response written by orjson when it is installed (the `serve` extra has it): cheaper per request under
    load. rlrm's own class: FastAPI's `ORJSONResponse` is deprecated (FastAPI 0.165 warns on using it)."""
    import importlib.util

    from starlette.responses import JSONResponse

    if importlib.util.find_spec("orjson") is None:
        return JSONResponse
    import orjson

    class OrjsonResponse(JSONResponse):
        def render(self, content) -> bytes:
            # as FastAPI's did: int keys (token ids) written as strings, numpy values as numbers
            return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)

    return OrjsonResponse


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


def sampling_of(body, default_max: int) -> SamplingParams:
    max_new = body.max_completion_tokens or body.max_tokens or default_max
    return SamplingParams(
        temperature=body.temperature, top_p=body.top_p, top_k=body.top_k, max_new_tokens=max_new, seed=body.seed
    )


def with_seed(sampling: SamplingParams, seed: int) -> SamplingParams:
    from dataclasses import replace

    return replace(sampling, seed=seed)


def no_stream(stream: bool) -> None:
    if stream:
        raise RequestError("stream=true is not supported by the embedded server; send stream=false")


def token_pieces(backend, comp: Completion) -> list[tuple[str, list[int]]]:
    """Each sampled token as OpenAI's log-probs show it: its text (the pieces join to the answer's text; a token
    holding part of a character is U+FFFD) and its UTF-8 bytes (exact for byte-level BPE, where a character split
    over two tokens is half in each). Not the vocabulary's symbols: "Ġ+" is " +", "Ċ" is a line break."""
    tokenizer = backend.tokenizer
    ids = list(comp.token_ids)
    texts = tokenizer.batch_decode([[t] for t in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    byte_of = _byte_level_map(tokenizer)
    special = set(getattr(tokenizer, "all_special_ids", ()) or ()) | set(getattr(tokenizer, "added_tokens_decoder", {}))
    pieces = []
    for t, text, symbol in zip(ids, texts, tokenizer.convert_ids_to_tokens(ids)):
        if byte_of is not None and t not in special and all(c in byte_of for c in symbol):
            pieces.append((text, [byte_of[c] for c in symbol]))
        else:
            pieces.append((text, list(text.encode())))
    return pieces


@functools.lru_cache(maxsize=8)
def _byte_level_map(tokenizer) -> dict[str, int] | None:
    """GPT-2's byte-level alphabet read backwards (symbol -> byte), for a tokenizer that decodes byte-level."""
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    if type(decoder).__name__ != "ByteLevel":
        return None
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols, extra = {}, 0
    for b in range(256):
        if b in printable:
            symbols[chr(b)] = b
        else:
            symbols[chr(256 + extra)] = b
            extra += 1
    return symbols
