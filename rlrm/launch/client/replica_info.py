"""What the rollout replicas serve, checked against the trainer's own model before a run starts.

    versions, max_context, dtype, gpus = check_replicas(urls, api_key, TrainerModel("tiny:policy", 510, 510, None))

SGLang and rlrm's embedded server answer `/get_model_info`; a replica whose vocabulary, tokenizer or
chat template differs from the trainer's is one error naming both. vLLM serves no such route: nothing
is compared, its versions are unknown (None) and its dtype too (the actor recomputes its log-probs).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rlrm.call_errors import TransientError
from rlrm.errors import RolloutServerError
from rlrm.launch.client.wire import int_or_none
from rlrm.launch.common import http, progress
from rlrm.launch.common.model_info import ENGINE_NAME


@dataclass(frozen=True)
class TrainerModel:
    """What the trainer's own model and tokenizer are, for the replicas to be checked against."""

    name: str
    vocab_size: int  # rows of the embedding
    tokenizer_size: int  # len(tokenizer)
    chat_template_sha256: str | None


def _context_from_models(url: str, headers: dict, timeout_s: float) -> dict:
    """{"max_context_length": N} from vLLM's /v1/models (`max_model_len` of the model it serves), else {}: so a
    prompt too long for a vLLM replica is refused naming the settings to lower, not answered by its 400."""
    try:
        answer = http.get(url + "/v1/models", headers=headers, timeout_s=timeout_s)
        models = answer.json().get("data") if answer.status == 200 else None
    except (TransientError, ValueError, AttributeError):
        return {}
    said = [m.get("max_model_len") for m in models or [] if isinstance(m, dict)]
    lengths: list[int] = [n for n in said if type(n) is int and n > 0]
    return {"max_context_length": min(lengths)} if lengths else {}


def model_info(url: str, headers: dict, *, tries: int = 3, pause_s: float = 0.5, timeout_s: float = 10.0) -> dict:
    """A server's `/get_model_info` answer; {} when it serves no such route (hosted APIs; vLLM: its context length
    from /v1/models) or answers something else than model info.

    A busy server (5xx, 429) or one that does not answer is asked again (`tries` in all, `pause_s` doubling
    between, `timeout_s` each): a busy moment must not pass for "reports nothing", which would skip the checks
    this answer feeds. Still nothing usable after that: {} with a warning line, and the checks trust the server
    as they trust vLLM.
    """
    why = ""
    for attempt in range(tries):
        if attempt:
            time.sleep(pause_s * 2 ** (attempt - 1))
        try:
            answer = http.get(url + "/get_model_info", headers=headers, timeout_s=timeout_s)
        except TransientError as exc:
            why = str(exc)
            continue
        if answer.status >= 500 or answer.status == 429:  # busy: as the readiness probes read it (fleet/health.py)
            why = f"it answered {answer.status}"
            continue
        if answer.status == 404:  # no such route (vLLM, hosted APIs): vLLM's /v1/models names the context length
            return _context_from_models(url, headers, timeout_s)
        if answer.status != 200:  # 401/403, 400: nothing to read
            return {}
        try:
            info = answer.json()
        except ValueError:
            return {}
        return info if isinstance(info, dict) else {}
    progress.say(
        f"warning: {url}/get_model_info gave no usable answer in {tries} tries ({why}): its model is not checked"
    )
    return {}


def held_version(url: str, api_key: str | None, timeout_s: float) -> int | None:
    """The weight version a replica reports holding; None when it says none, does not answer or answers otherwise
    (asked once, no warning: the caller loads the weights whatever the answer)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        answer = http.get(url + "/get_model_info", headers=headers, timeout_s=timeout_s)
        info = answer.json() if answer.status == 200 else None
    except (TransientError, ValueError):
        return None
    return int_or_none(info.get("weight_version")) if isinstance(info, dict) else None


def check_replicas(
    urls: list[str], api_key: str | None, expect: TrainerModel | None
) -> tuple[dict[str, int | None], int | None, str | None, dict[str, str | None]]:
    """Every replica's /get_model_info against the trainer's model (when the server reports it).

    Returns:
        (weight version per URL, None where not reported; the smallest context length reported; the
        replicas' dtype when every one is rlrm's embedded server, "tf32" for float32 computed in TF32 (`--tf32` on a
        GPU, as an actor with model.tf32 on CUDA), else None: vLLM/SGLang score tokens their own way; the UUID
        of each replica's GPU, None where it is not on one or does not say).
    """
    versions: dict[str, int | None] = {}
    gpus: dict[str, str | None] = {}
    engines = set()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    contexts = []
    for url in urls:
        info = model_info(url, headers)
        versions[url] = int_or_none(info.get("weight_version"))
        gpus[url] = info["gpu_uuid"] if isinstance(info.get("gpu_uuid"), str) else None
        precision = "tf32" if info.get("tf32") is True else info.get("dtype")
        engines.add((info.get("engine"), precision) if info.get("engine") == ENGINE_NAME else None)
        if isinstance(info.get("max_context_length"), int):
            contexts.append(info["max_context_length"])
        if expect is None:
            continue
        for key, label in (
            ("vocab_size", "vocabulary (embedding rows)"),
            ("tokenizer_size", "tokenizer size"),
            ("chat_template_sha256", "chat template (sha256)"),
        ):
            theirs, ours = info.get(key), getattr(expect, key)
            if theirs is not None and ours is not None and theirs != ours:
                raise RolloutServerError(
                    f"rollout replica {url} serves {info.get('model_path', '?')} with {label} {theirs}, but the trainer's "
                    f"policy {expect.name} has {ours}: serve the policy's own model and tokenizer"
                )
    max_context = min(contexts) if contexts else None
    only = engines.pop() if len(engines) == 1 else None
    dtype = only[1] if only is not None else None
    return versions, max_context, dtype, gpus
