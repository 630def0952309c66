"""The server backends, one object each, registered once: rlrm's embedded server, vLLM and SGLang.

    backend = backend_for("vllm")                      # a profile's `backend` key, checked once
    backend.argv(launch, "127.0.0.1", 8000)            # the replica's command line (`--dry-run` prints it)
    backend.env(api_key, Role.POLICY, "cpu")           # the variables its process needs
    backend.probe(Role.POLICY)                         # the request that tells it serves the role
    backend.classify_body(model, ids)                  # a DisRM's /classify request ...
    backend.classify_scores(answer)                    # ... and the score of each input in its answer
    backend.native_generate                            # capabilities, read where the fleet and client decide

Everything that differs between backends lives here; the fleet (rlrm/launch/fleet/server_fleet.py), its health
checks (health.py) and the trainer's client (rlrm/launch/client/wire.py) ask the object, never compare its name.
The external engines live in their own environments (rlrm/launch/fleet/engine_env.py finds them); nothing here
imports them.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rlrm.errors import ConfigError
from rlrm.launch.common.auth import ENV_VAR
from rlrm.launch.common.ports import port_taken
from rlrm.launch.common.roles import Role
from rlrm.launch.fleet.engine_env import ENGINES, EngineNotFound, find_engine
from rlrm.launch.fleet.process import embedded_server_argv
from rlrm.launch.fleet.spec import Batching, FleetSpec

VLLM_PLUGIN_DIR = str(Path(__file__).resolve().parent / "vllm_plugin")  # what a launched vLLM imports of rlrm
# vLLM's CPU KV cache in GiB: ample for tiny models, small enough for several engines on one machine
CPU_KV_CACHE_GIB = "1"
MAX_MODEL_LEN = 4096  # a cap for --max-model-len: a tiny model's own limit is used when it is lower
MEMORY_FLAGS = ("--gpu-memory-utilization", "--mem-fraction-static")


@dataclass(frozen=True)
class ReplicaLaunch:
    """What every replica of a fleet is started with; `argv` and `env` are the one place a replica's command line
    and environment are written (the pool launches them, `--dry-run` prints them).

    Build it from a fleet's settings with `ReplicaLaunch.of(spec, role, model_path, ...)`.
    """

    backend: Backend
    model_path: str
    role: Role
    threads: int = 1
    dtype: str = "float32"
    max_batch: int = 64
    api_key: str | None = None
    extra_args: tuple[str, ...] = ()
    served_model_name: str | None = None
    gpu_ids: tuple[int, ...] = ()
    gpu_memory_utilization: float | None = 0.85
    device: str = "cpu"  # where it runs: engine_device(gpu_ids)

    @classmethod
    def of(
        cls,
        spec: FleetSpec,
        role: Role | str,
        model_path: str,
        api_key: str | None = None,
        extra_args: Sequence[str] | None = None,
        served_model_name: str | None = None,
    ) -> ReplicaLaunch:
        """The launch a fleet spec describes (`extra_args`: the spec's own, after any flags the fleet adds).
        ConfigError when the spec's extra_args set what rlrm sets per replica (its port)."""
        _refuse_own_port(spec)
        return cls(
            backend=backend_for(spec.backend),
            model_path=model_path,
            role=Role(role),
            threads=spec.threads,
            dtype=spec.dtype,
            max_batch=spec.max_batch or 64,
            api_key=api_key,
            extra_args=tuple(spec.extra_args if extra_args is None else extra_args),
            served_model_name=served_model_name,
            gpu_ids=spec.gpu_ids,
            gpu_memory_utilization=spec.gpu_memory_utilization,
            device=engine_device(spec.gpu_ids),
        )

    def argv(self, host: str, port: int) -> list[str]:
        """The command line of the replica at host:port."""
        return self.backend.argv(self, host, port)

    def env(self, i: int) -> dict[str, str | None]:
        """The environment of replica `i` (None removes an inherited variable): the backend's variables (the key
        in one only the owner can read, never on a command line), its GPU."""
        env: dict[str, str | None] = {ENV_VAR: None, **self.backend.env(self.api_key, self.role, self.device)}
        if self.gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = str(self.gpu_ids[i % len(self.gpu_ids)])
        return env


def engine_device(gpu_ids: Sequence[int] | None = None) -> str:
    """Where a launched engine runs: cuda when GPUs were handed out or this machine has an NVIDIA driver, else cpu."""
    return "cuda" if gpu_ids or shutil.which("nvidia-smi") else "cpu"


@dataclass(frozen=True)
class Probe:
    """One tiny request a server of a role must answer in its endpoint's shape (rlrm/launch/fleet/health.py).
    `refused_hint`: appended to the error when the server refuses it (400/404): how to serve the role.
    `answered`: whether a 200's JSON is in the backend's shape for the path (None: health.py's check of the path)."""

    path: str
    body: Callable[[str | None], dict[str, Any]]
    refused_hint: str = ""
    answered: Callable[[Any], bool] | None = None


CHAT_PROBE = Probe(
    "/v1/chat/completions",
    lambda model: {
        "model": model,
        "messages": [{"role": "user", "content": "Say OK."}],
        "max_tokens": 1,
        "temperature": 0,
    },
)
# a DisRM's probe: `Backend.probe` builds it from the backend's own /classify body (`classify_body`)
CLASSIFY_PROBE = Probe("/classify", lambda model: {"model": model, "input": "ok", "use_activation": False})
# rollout servers: SGLang's native /generate with token ids (embedded, sglang), or vLLM's completions
GENERATE_PROBE = Probe(
    "/generate",
    lambda model: {
        "input_ids": [1],
        "sampling_params": {"max_new_tokens": 1, "temperature": 0},
        "return_logprob": True,
    },
)
COMPLETIONS_PROBE = Probe(
    "/v1/completions", lambda model: {"model": model, "prompt": [1], "max_tokens": 1, "temperature": 0, "logprobs": 0}
)


class Backend:
    """What every backend says about itself; a subclass per engine fills it in.

    Capabilities:
        external: an engine of its own environment (find_engine), launched as `python -m <module>`.
        native_generate: speaks SGLang's native API (`/generate` with token ids, versioned
            `/update_weights_from_disk`); else vLLM's `/v1/completions` and `/collective_rpc` reload.
        supports_distributed_weight_sync: serves SGLang's `/init_weights_update_group` and
            `/update_weights_from_distributed` (`rollout.server.weight_sync: distributed`).
        needs_gpu: runs on a GPU only (SGLang's wheel is CUDA-only).
        key_in_env: takes its bearer key from its environment (SGLang takes it only on its command line).
        waits_for_weights: a restarted policy replica can be held unhealthy until given the current weights.
    """

    name: ClassVar[str]
    external: ClassVar[bool] = True
    native_generate: ClassVar[bool] = True
    supports_distributed_weight_sync: ClassVar[bool] = True
    needs_gpu: ClassVar[bool] = False
    key_in_env: ClassVar[bool] = True
    waits_for_weights: ClassVar[bool] = False
    # a policy replica takes a tied embedding once and fills lm_head in itself (rlrm's server does; vLLM's CPU
    # build kept the lm_head it had, stale, when a sync left it out: both names are sent to the others)
    takes_tied_once: ClassVar[bool] = False

    def __str__(self) -> str:
        return self.name

    def argv(self, launch: ReplicaLaunch, host: str, port: int, python: str | None = None) -> list[str]:
        """The command line of one replica serving `launch.model_path` in `launch.role` at host:port."""
        raise NotImplementedError

    def env(self, api_key: str | None, role: Role, device: str) -> dict[str, str | None]:
        """Environment variables its process needs."""
        return {}

    # how a server of this backend is made to serve /classify, said when one refuses the probe (400/404); the
    # embedded backend's /classify is vLLM's, so a vLLM given as `addresses` is named too
    classify_hint: ClassVar[str] = (
        "; a DisRM must be served for classification (rlrm's server: --role disrm; a vLLM: --runner pooling "
        "--convert classify; rlrm adds these to the servers it launches)"
    )

    def probe(self, role: Role) -> Probe:
        """The request that tells a server of this backend serves `role`."""
        if role is Role.DISRM:
            return Probe(
                "/classify",
                lambda model: self.classify_body(model, "ok"),
                refused_hint=self.classify_hint,
                answered=self._scores_in,
            )
        if role is Role.GENRM:
            return CHAT_PROBE
        return GENERATE_PROBE if self.native_generate else COMPLETIONS_PROBE

    def classify_body(self, model: str | None, inputs: str | list[int] | list[list[int]]) -> dict[str, Any]:
        """A DisRM's POST /classify body for one text, one sequence of token ids or a batch of them: vLLM's
        (`{"model", "input", "use_activation": false}`), which rlrm's embedded server serves too."""
        return {"model": model, "input": inputs, "use_activation": False}

    def classify_scores(self, answer: Any) -> list[float | None]:
        """The score of each input of a /classify answer (KeyError, IndexError or TypeError when it is not in
        this backend's shape; None for a non-finite score the server sent as null).

        The score is the sequence classifier's raw logit of its last label: vLLM (and the embedded server) answer
        `{"data": [{"probs": [...]}]}`, which with `use_activation: false` holds the classifier head's raw
        logits, not softmax/sigmoid probabilities; `probs[-1]` is the last label's, a reward model's only one.
        SGLang's override reads the same logit from its own answer."""
        return [entry["probs"][-1] for entry in answer["data"]]

    def _scores_in(self, answer: Any) -> bool:
        """Whether a /classify answer holds a score in this backend's shape (`classify_scores` reads it)."""
        try:
            scores = self.classify_scores(answer)
        except (KeyError, IndexError, TypeError):
            return False
        return len(scores) > 0 and all(s is None or isinstance(s, (int, float)) for s in scores)

    def require(self) -> None:
        """Raise a one-line error naming the variable and the setup command when its environment is missing."""
        if self.external:
            find_engine(self.name)

    def python(self) -> str:
        """Its environment's python, or `$RLRM_VLLM_PYTHON` as a placeholder when there is none (for --dry-run)."""
        try:
            return find_engine(self.name).python
        except EngineNotFound:
            return "$" + ENGINES[self.name].variable

    def batch_flags(self, batching: Batching) -> list[str]:
        """Flags only rlrm's own server takes: the batch window of a replica that generates (a policy, a judge)."""
        return []

    def policy_flags(self, sync_timeout_s: float | None, weights_dir: str | None) -> list[str]:
        """Flags only rlrm's own policy server takes: the weight-update group's timeout (`sync_timeout_s`,
        distributed sync), the only folder it loads weights from."""
        return []

    def weights_dir_flags(self, weights_dir: str) -> list[str]:
        """The flag that names the only folder its policy replicas load weights from (rlrm's server only)."""
        return []


class EmbeddedBackend(Backend):
    """rlrm's own server (transformers; rlrm/launch/server): CPU or GPU, every role, SGLang's native API."""

    name = "embedded"
    external = False
    waits_for_weights = True
    takes_tied_once = True

    def argv(self, launch: ReplicaLaunch, host: str, port: int, python: str | None = None) -> list[str]:
        extra = ["--threads", str(launch.threads), "--dtype", launch.dtype, "--max-batch", str(launch.max_batch)]
        if launch.api_key:
            extra += ["--api-key-env", ENV_VAR]
        return embedded_server_argv(
            launch.model_path, launch.role, port, host=host, extra=extra + list(launch.extra_args)
        )

    def env(self, api_key: str | None, role: Role, device: str) -> dict[str, str | None]:
        """The key in RLRM_API_KEY, which `--api-key-env` names (None: no inherited key either)."""
        return {ENV_VAR: api_key or None}

    def batch_flags(self, batching: Batching) -> list[str]:
        return ["--batch-wait-ms", f"{batching.wait_ms:g}", "--batch-gap-ms", f"{batching.gap_ms:g}"]

    def policy_flags(self, sync_timeout_s: float | None, weights_dir: str | None) -> list[str]:
        flags: list[str] = []
        if sync_timeout_s is not None:  # the replicas' side of the weight-update group's timeout
            flags += ["--weight-sync-timeout-s", f"{sync_timeout_s:g}"]
        if weights_dir is not None:
            flags += self.weights_dir_flags(weights_dir)
        return flags

    def weights_dir_flags(self, weights_dir: str) -> list[str]:
        return ["--weights-dir", weights_dir]


class VllmBackend(Backend):
    """vLLM's OpenAI server: completions with token ids, /classify for a DisRM, the dev-mode weight reload."""

    name = "vllm"
    native_generate = False
    # vLLM documents no equivalent of SGLang's update_weights_from_distributed
    supports_distributed_weight_sync = False
    classify_hint = (  # a vLLM started for generation has no /classify (404), or refuses it for its runner (400)
        "; a DisRM must be served for classification (vLLM: --runner pooling --convert classify, which rlrm adds to "
        "the vLLM servers it launches)"
    )

    def argv(self, launch: ReplicaLaunch, host: str, port: int, python: str | None = None) -> list[str]:
        model, role = launch.model_path, launch.role
        argv = [python or self.python(), "-m", ENGINES[self.name].server_module]
        argv += ["--model", model, "--host", host, "--port", str(port), "--dtype", launch.dtype]
        argv += ["--served-model-name", launch.served_model_name or model, "--max-num-seqs", str(launch.max_batch)]
        max_len = max_model_len(model)
        if max_len:
            argv += ["--max-model-len", str(max_len)]
        if role is Role.DISRM:
            argv += ["--runner", "pooling", "--convert", "classify"]  # serves /classify with raw scores
        if not any(a.split("=")[0].replace("_", "-") == "--generation-config" for a in launch.extra_args):
            # vLLM's default (auto) applies the model's generation_config.json to every field a request leaves out:
            # a model card's repetition_penalty would sample every rollout and judgement from a policy rlrm never
            # sent (and the embedded server never applies); `vllm`: only what the request says
            argv += ["--generation-config", "vllm"]
        if role is Role.POLICY:
            # behaviour log-probs as the trainer computes them, log_softmax(logits / temperature): vLLM's default
            # (raw_logprobs) is taken before temperature, and off-policy modes train on them without a recompute.
            # vLLM takes them after top-p/top-k filtering too (renormalised over the kept tokens): the profile
            # refuses filtering where they are trained on unrecomputed (rlrm/config/schema.py)
            argv += ["--logprobs-mode", "processed_logprobs"]
        if launch.api_key:  # vLLM's own check covers /v1 only; this one every path but /health
            argv += ["--middleware", "rlrm_vllm_auth.RequireKey"]
        if launch.device == "cpu":
            # Whole prefills only: a split prefill with per-request seeds kills vLLM's CPU engine core
            # ("CPU Generator does not use offset"); FEASIBILITY.md, 2026-11-24.
            argv += ["--no-enable-chunked-prefill"]
        elif _memory_share(launch):
            argv += ["--gpu-memory-utilization", f"{_memory_share(launch):g}"]
        return argv + list(launch.extra_args)  # the key goes in VLLM_API_KEY (env), out of `ps`

    def env(self, api_key: str | None, role: Role, device: str) -> dict[str, str | None]:
        """vLLM reads its key from VLLM_API_KEY; a policy server needs VLLM_SERVER_DEV_MODE=1 for `/collective_rpc`
        (its weight reload; rlrm/launch/client/wire.py); on CPU it sizes its KV cache from VLLM_CPU_KVCACHE_SPACE
        (GiB; one set in the environment wins)."""
        env: dict[str, str | None] = {"VLLM_API_KEY": api_key} if api_key else {}
        if api_key:  # where the server imports its --middleware from (vllm_plugin/rlrm_vllm_auth.py)
            inherited = os.environ.get("PYTHONPATH")
            env["PYTHONPATH"] = VLLM_PLUGIN_DIR + (os.pathsep + inherited if inherited else "")
        if role is Role.POLICY:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        if device == "cpu":
            env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", CPU_KV_CACHE_GIB)
        return env


class SGLangBackend(Backend):
    """SGLang's server: its native API, on a CUDA machine only (the CPU tests use a stand-in)."""

    name = "sglang"
    needs_gpu = True
    key_in_env = False  # SGLang's documented way to take a key is --api-key (visible in `ps`)
    classify_hint = (
        "; a DisRM must be served for classification (SGLang: --is-embedding, which rlrm adds to the SGLang servers "
        "it launches; SGLang's native /classify takes input_ids or text)"
    )

    def classify_body(self, model: str | None, inputs: str | list[int] | list[list[int]]) -> dict[str, Any]:
        """SGLang's native /classify (http_server.py `classify_request(obj: EmbeddingReqInput)`): `text`, or
        `input_ids` (one list of ids, or a list of them for a batch). It names no model (one per server)."""
        return {"text": inputs} if isinstance(inputs, str) else {"input_ids": inputs}

    def classify_scores(self, answer: Any) -> list[float | None]:
        """SGLang answers /classify as an embedding request: `{"embedding": [...], "meta_info": {...}}`, a list of
        those for a batch. A sequence classifier's (reward model's) embedding is its pooled head output, raw
        logits with no activation (e.g. Qwen2ForRewardModel: last-token pooling, normalize=False): `[-1]` is the
        last label's raw logit, the quantity vLLM's `probs[-1]` holds with use_activation false (the base class)."""
        answers = answer if isinstance(answer, list) else [answer]
        return [entry["embedding"][-1] for entry in answers]

    def argv(self, launch: ReplicaLaunch, host: str, port: int, python: str | None = None) -> list[str]:
        model = launch.model_path
        argv = [python or self.python(), "-m", ENGINES[self.name].server_module]
        argv += ["--model-path", model, "--host", host, "--port", str(port), "--dtype", launch.dtype]
        argv += ["--served-model-name", launch.served_model_name or model]
        argv += ["--max-running-requests", str(launch.max_batch)]
        if launch.device != "cpu" and _memory_share(launch):
            argv += ["--mem-fraction-static", f"{_memory_share(launch):g}"]
        if launch.role is Role.DISRM:
            argv += ["--is-embedding"]  # reward models are served as embedding/classification models
        if launch.api_key:
            argv += ["--api-key", launch.api_key]
        return argv + list(launch.extra_args)


BACKENDS: dict[str, Backend] = {b.name: b for b in (EmbeddedBackend(), VllmBackend(), SGLangBackend())}


def backend_for(backend: str | Backend) -> Backend:
    """The backend a profile key or `--backend` names; ConfigError naming the known ones otherwise."""
    if isinstance(backend, Backend):
        return backend
    try:
        return BACKENDS[backend]
    except KeyError:
        raise ConfigError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}") from None


def _refuse_own_port(spec: FleetSpec) -> None:
    """A `--port` in extra_args wins over the free port rlrm gives each replica (the last flag wins), so the engine
    would listen elsewhere, or fail on a port another process holds, while rlrm waits on its own port until
    start_timeout_s: refuse it before anything starts, naming the port and the key."""
    args = list(spec.extra_args)
    for i, arg in enumerate(args):
        if arg == "--port" or arg.startswith("--port="):
            value = arg.partition("=")[2] or (args[i + 1] if i + 1 < len(args) else "")
            held = value.isdigit() and 0 < int(value) < 65536 and port_taken("127.0.0.1", int(value))
            raise ConfigError(
                f"{spec.section}.extra_args sets --port {value}"
                + (" (in use by another process)" if held else "")
                + f": rlrm starts every replica on a free port of its own and waits for it there; remove --port "
                f"from {spec.section}.extra_args"
            )


def _memory_share(launch: ReplicaLaunch) -> float | None:
    """The GPU share the key gives, or None where extra_args give one (not twice on one command line)."""
    if {*MEMORY_FLAGS} & {*launch.extra_args}:
        return None
    return launch.gpu_memory_utilization


def model_positions(model: str) -> int | None:
    """The positions a local folder's config.json gives its model (GPT-2 and kin: n_positions); None for a hub id or
    a folder without one."""
    try:
        config = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    text = config.get("text_config") or {}
    limit = next(
        (c.get(k) for c in (config, text) for k in ("max_position_embeddings", "n_positions") if c.get(k)), None
    )
    return int(limit) if limit else None


def max_model_len(model: str) -> int | None:
    """min(the model's positions, MAX_MODEL_LEN) for a local folder: the --max-model-len a launched vLLM gets; None
    for a hub id or a folder without config.json (vLLM decides)."""
    positions = model_positions(model)
    return min(positions, MAX_MODEL_LEN) if positions else None
