"""What a rollout request and a weight update look like on the wire, per server backend.

    wire = wire_for("sglang")                  # embedded and sglang: SGLang's native API
    body = wire.request(prompt_ids, sampling, seed)
    tokens, log_probs, finish, version = wire.parse(response_json)
    for path, payload in wire.sync_calls("/dev/shm/.../v3", version=3): POST path payload

SGLang (and rlrm's embedded server): `POST /generate` with `input_ids`, `sampling_params`
(temperature, top_p, top_k, max_new_tokens, stop_token_ids, sampling_seed) and `return_logprob`
(top_k off is sent as -1, which SGLang and vLLM both take: SGLang refuses 0);
the answer has `output_ids` and `meta_info` {output_token_logprobs [[logprob, id, text]...],
finish_reason {type}, weight_version}. Weights: `POST /update_weights_from_disk` {model_path,
load_format, weight_version, abort_all_requests} -> {success, message, num_paused_requests}
(SGLang's UpdateWeightFromDiskReqInput / ...ReqOutput); or, with `weight_sync: distributed`,
`POST /init_weights_update_group`, `/update_weights_from_distributed` and
`/destroy_weights_update_group` (`init_group`, `update_distributed`, `destroy_group`;
rlrm/launch/client/weight_broadcast.py drives them).

vLLM: `POST /v1/completions` with the prompt as token ids, `logprobs: 0` and `return_token_ids`
(the sampled ids come back in `choices[0].token_ids`; older releases without it are refused at
the first answer). Weights: vLLM documents no versioned disk-reload endpoint; its development
server (`VLLM_SERVER_DEV_MODE=1`, which the fleet sets for policy servers) exposes
`POST /collective_rpc` {method, kwargs}, and the workers' `reload_weights(weights_path=...)`
reads a checkpoint folder in place; `POST /reset_prefix_cache` then drops KV blocks computed with
the old weights (a server without VLLM_SERVER_DEV_MODE=1 answers /collective_rpc 404, reported as
such). vLLM answers carry no weight version, so the engine stamps the version in force when the
request was sent, and a reload waits until no request is in flight (rlrm/launch/client/version_gate.py):
every scheduling mode runs on it.
"""

from __future__ import annotations

from array import array

from rlrm.inference.base import SamplingParams
from rlrm.launch.common import http
from rlrm.launch.common.weight_group import GROUP
from rlrm.launch.fleet.backends import Backend, backend_for


def _float32(values) -> list[float]:
    """The values rounded to float32, as the in-process engine returns them."""
    return array("f", values).tolist()


def top_k_off_as_minus_one(top_k: int) -> int:
    """rlrm's top_k (-1 or 0: off, as in HF/TRL) as every engine takes it: -1 for off. SGLang refuses 0
    (SamplingParams.verify: "top_k must be -1 (disable) or at least 1"); vLLM takes -1 in every release (0.32:
    0 or -1, "quietly accept -1 as disabled"; older releases refused 0), as does rlrm's embedded server."""
    return -1 if top_k <= 0 else top_k


class SGLangWire:
    """SGLang's native API (also what rlrm's embedded server speaks)."""

    name = "sglang"
    generate_path = "/generate"
    carries_version = True

    def request(self, prompt_ids: list[int], sampling: SamplingParams, seed: int) -> dict:
        params: dict[str, object] = {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": top_k_off_as_minus_one(sampling.top_k),
            "max_new_tokens": sampling.max_new_tokens,
            "sampling_seed": seed,
        }
        if sampling.stop_token_ids:
            params["stop_token_ids"] = list(sampling.stop_token_ids)
        return {"input_ids": list(prompt_ids), "sampling_params": params, "return_logprob": True}

    batchable = True  # /generate takes lists of input_ids and sampling_params

    def request_many(self, items: list[tuple[list[int], SamplingParams, int]]) -> dict:
        """One /generate body for several requests (SGLang's batch form), or the plain one for a single request."""
        bodies = [self.request(*item) for item in items]
        if len(bodies) == 1:
            return bodies[0]
        return {
            "input_ids": [b["input_ids"] for b in bodies],
            "sampling_params": [b["sampling_params"] for b in bodies],
            "return_logprob": True,
        }

    def parse_many(self, body, n: int) -> list[tuple[list[int], list[float], str, int | None]]:
        answers = body if isinstance(body, list) else [body]
        if len(answers) != n:
            raise ValueError(f"{n} answers (got {len(answers)})")
        return [self.parse(a) for a in answers]

    def parse(self, body: dict) -> tuple[list[int], list[float], str, int | None]:
        body = body[0] if isinstance(body, list) else body
        meta = body["meta_info"]
        tokens = [int(t) for t in body["output_ids"]]
        log_probs = _float32(float(entry[0]) for entry in meta["output_token_logprobs"])
        finish = (
            meta["finish_reason"]["type"] if isinstance(meta.get("finish_reason"), dict) else meta.get("finish_reason")
        )
        version = meta.get("weight_version")
        return tokens, log_probs, "length" if finish == "length" else "stop", int_or_none(version)

    def sync_calls(self, path: str, version: int) -> list[tuple[str, dict]]:
        return [
            (
                "/update_weights_from_disk",
                {
                    "model_path": str(path),
                    "load_format": None,
                    "weight_version": str(version),
                    "abort_all_requests": False,
                },
            )
        ]

    def init_group(
        self,
        master_address: str,
        master_port: int,
        rank_offset: int,
        world_size: int,
        backend: str,
        group_name: str = GROUP,
    ) -> tuple[str, dict]:
        """SGLang's InitWeightsUpdateGroupReqInput: join the trainer's weight-update group as `rank_offset`."""
        return "/init_weights_update_group", {
            "master_address": master_address,
            "master_port": master_port,
            "rank_offset": rank_offset,
            "world_size": world_size,
            "group_name": group_name,
            "backend": backend,
        }

    def update_distributed(
        self, names: list[str], dtypes: list[str], shapes: list[list[int]], version: int, group_name: str = GROUP
    ) -> tuple[str, dict]:
        """SGLang's UpdateWeightsFromDistributedReqInput: receive these tensors by broadcast from rank 0, in order."""
        return "/update_weights_from_distributed", {
            "names": names,
            "dtypes": dtypes,
            "shapes": shapes,
            "group_name": group_name,
            "flush_cache": True,
            "abort_all_requests": False,
            "weight_version": str(version),
            "load_format": None,
        }

    def destroy_group(self, group_name: str = GROUP) -> tuple[str, dict]:
        """SGLang's DestroyWeightsUpdateGroupReqInput."""
        return "/destroy_weights_update_group", {"group_name": group_name}

    def status_failure(self, path: str, status: int, text: str) -> str:
        """What a sync call answered with another status than 200 means."""
        return f"POST {path} answered {status}: {text[:200]}"

    def sync_failure(self, path: str, body) -> str | None:
        """What the (JSON, or None) answer to a sync call says went wrong, or None."""
        if not isinstance(body, dict):  # every SGLang weight call answers {success, message}
            return f"{path} answered 200 without SGLang's {{success, message}} body"
        if not body.get("success", False):
            return str(body.get("message") or "success: false")
        return None


class VllmWire:
    """vLLM's OpenAI completions with token ids, and its development-mode weight reload."""

    name = "vllm"
    generate_path = "/v1/completions"
    carries_version = False

    def __init__(self, model_name: str):
        self.model_name = model_name

    def request(self, prompt_ids: list[int], sampling: SamplingParams, seed: int) -> dict:
        body = {
            "model": self.model_name,
            "prompt": list(prompt_ids),
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": top_k_off_as_minus_one(sampling.top_k),
            "seed": seed,
            "logprobs": 0,
            "return_token_ids": True,
            # a vLLM started by the user may apply its model's generation_config.json to what a request leaves out
            "repetition_penalty": 1.0,
            "min_p": 0.0,
        }
        if sampling.stop_token_ids:
            body["stop_token_ids"] = list(sampling.stop_token_ids)
        return body

    batchable = False  # one seed per completions request: requests go one by one

    def request_many(self, items: list[tuple[list[int], SamplingParams, int]]) -> dict:
        (item,) = items
        return self.request(*item)

    def parse_many(self, body, n: int) -> list[tuple[list[int], list[float], str, int | None]]:
        return [self.parse(body)]

    def parse(self, body: dict) -> tuple[list[int], list[float], str, int | None]:
        choice = body["choices"][0]
        if choice.get("token_ids") is None:
            raise KeyError(
                "token_ids (this vLLM does not return sampled token ids: use a release with return_token_ids)"
            )
        tokens = [int(t) for t in choice["token_ids"]]
        log_probs = _float32(float(x) for x in choice["logprobs"]["token_logprobs"])
        return tokens, log_probs, "length" if choice.get("finish_reason") == "length" else "stop", None

    def sync_calls(self, path: str, version: int) -> list[tuple[str, dict]]:
        return [
            ("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(path)}}),
            ("/reset_prefix_cache", {}),
        ]

    def status_failure(self, path: str, status: int, text: str) -> str:
        """What a sync call answered with another status than 200 means (404: a server not in development mode)."""
        if status == 404 and path == "/collective_rpc":
            return (
                "POST /collective_rpc answered 404: vLLM serves it only in development mode; start that server "
                "with VLLM_SERVER_DEV_MODE=1 in its environment"
            )
        return f"POST {path} answered {status}: {text[:200]}"

    def sync_failure(self, path: str, body) -> str | None:
        return None  # vLLM answers an error status when the reload fails


def post_sync_call(url: str, path: str, body: dict, wire, api_key: str | None, timeout_s: float) -> str | None:
    """POST one weight-sync call to a replica: None when it took, else what went wrong (its status, or
    what `wire.sync_failure` reads in the answer). No answer raises RequestTimeout (none within `timeout_s`) or
    TransientError (the connection failed), from rlrm.call_errors."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    resp = http.post(url + path, body, headers=headers, timeout_s=timeout_s)
    if resp.status != 200:
        return wire.status_failure(path, resp.status, resp.text)
    try:
        answer = resp.json()
    except ValueError:
        answer = None  # vLLM's /reset_prefix_cache answers an empty 200
    return wire.sync_failure(path, answer)


def wire_for(backend: str | Backend, model_name: str = "") -> SGLangWire | VllmWire:
    """The wire of a backend: SGLang's native API where it speaks it (embedded, sglang), else vLLM's, whose
    requests name `model_name`."""
    return SGLangWire() if backend_for(backend).native_generate else VllmWire(model_name)


def int_or_none(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None  # SGLang's default version is the string "default": no number to compare
