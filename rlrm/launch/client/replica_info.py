"""What the rollout replicas serve, checked against the trainer's own model before a run starts.

    versions, max_context, dtype = check_replicas(urls, api_key, TrainerModel("tiny:policy", 510, 510, None))

SGLang and rlrm's embedded server answer `/get_model_info`; a replica whose vocabulary, tokenizer or
chat template differs from the trainer's is one error naming both. vLLM serves no such route: nothing
is compared, its versions are unknown (None) and its dtype too (the actor recomputes its log-probs).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlrm.call_errors import TransientError
from rlrm.errors import RolloutServerError
from rlrm.launch.client.wire import int_or_none
from rlrm.launch.common import http
from rlrm.launch.common.model_info import ENGINE_NAME


@dataclass(frozen=True)
class TrainerModel:
    """What the trainer's own model and tokenizer are, for the replicas to be checked against."""

    name: str
    vocab_size: int  # rows of the embedding
    tokenizer_size: int  # len(tokenizer)
    chat_template_sha256: str | None


def model_info(url: str, headers: dict) -> dict:
    """A server's `/get_model_info` answer ({} when it has none or cannot be reached: vLLM, hosted APIs)."""
    try:
        answer = http.get(url + "/get_model_info", headers=headers, timeout_s=30.0)
        info = answer.json() if answer.status == 200 else {}
    except (TransientError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def check_replicas(
    urls: list[str], api_key: str | None, expect: TrainerModel | None
) -> tuple[dict[str, int | None], int | None, str | None]:
    """Every replica's /get_model_info against the trainer's model (when the server reports it).

    Returns:
        (weight version per URL, None where not reported; the smallest context length reported; the
        replicas' dtype when every one is rlrm's embedded server, else None: vLLM/SGLang score tokens their own way).
    """
    versions: dict[str, int | None] = {}
    engines = set()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    contexts = []
    for url in urls:
        info = model_info(url, headers)
        versions[url] = int_or_none(info.get("weight_version"))
        engines.add((info.get("engine"), info.get("dtype")) if info.get("engine") == ENGINE_NAME else None)
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
        if isinstance(info.get("max_context_length"), int):
            contexts.append(info["max_context_length"])
    max_context = min(contexts) if contexts else None
    only = engines.pop() if len(engines) == 1 else None
    dtype = only[1] if only is not None else None
    return versions, max_context, dtype
