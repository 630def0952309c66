"""What the embedded server runs: a causal LM (policy, genrm) or a sequence classifier (disrm).

The generative side reuses the rollout engine (dynamic batching, seeded sampling, log-probs);
the classifier side is a right-padded batched forward that returns the logit at each sequence's
last real token, in float32.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from rlrm.errors import ConfigError, ModelError
from rlrm.inference.hf import HFRolloutEngine
from rlrm.inference.loading import eos_token_ids, load_causal_lm, load_tokenizer, pick_device
from rlrm.inference.static_decode import captures_graphs
from rlrm.launch.common.roles import Role
from rlrm.launch.server.batcher import DynamicBatcher

COMPILE = ("off", "cudagraphs", "inductor")  # --compile: how generation decodes (rlrm.inference.static_decode)


@dataclass
class ServerConfig:
    model_path: str
    role: Role = Role.GENRM  # a string is read as its Role
    dtype: str = "float32"
    max_batch: int = 64
    max_queue: int = 1024
    api_key: str | None = None
    served_model_name: str | None = None
    device: str = "auto"  # auto, cpu, cuda or cuda:N; resolved on construction (auto: cuda when visible)
    wait_for_weights: bool = False  # policy replica restarted by a fleet: 503 until its first weight update
    batch_wait_ms: float = 2.0  # the longest a generation batch waits for more requests after its first
    batch_gap_ms: float | None = None  # close it sooner once no request arrived for this long
    compile: str = "off"  # generation decoding: off, cudagraphs or inductor (rlrm.inference.static_decode)
    weight_sync_timeout_s: float = 300.0  # bound on joining a weight-update group and on each broadcast
    weights_dir: str | None = None  # the only folder /update_weights_from_disk loads from (None: none)
    tf32: bool = False  # CUDA's float32 matrix products in TF32 (rlrm.inference.tf32), for the server's process

    def __post_init__(self) -> None:
        self.role = Role(self.role)
        if self.compile not in COMPILE:
            raise ConfigError(f"unknown --compile {self.compile!r}: use off, cudagraphs (GPU) or inductor")
        if self.compile != "off" and self.role is Role.DISRM:
            raise ConfigError(
                f"--compile {self.compile} speeds up generation (roles policy and genrm); a disrm server scores "
                "with one forward a batch: leave --compile off"
            )
        self.device = pick_device(self.device, "--device")  # before the model loads: a wrong device fails at once
        if self.compile == "cudagraphs" and not captures_graphs(self.device):
            raise ConfigError(
                f"--compile cudagraphs needs a GPU, and this server's device is {self.device}: use --compile off"
            )

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model_path

    @property
    def computes_in_tf32(self) -> bool:
        """Whether `tf32` changes this server's numbers: float32 weights on a GPU (bf16, float16 and the CPU
        do not read the setting)."""
        return self.tf32 and self.dtype == "float32" and self.device.startswith("cuda")


class CausalLMBackend:
    """Generation for /v1/completions, /v1/chat/completions and /generate."""

    def __init__(self, cfg: ServerConfig):
        device = cfg.device  # resolved and checked by the config
        self.tokenizer = load_tokenizer(cfg.model_path)
        model = load_causal_lm(cfg.model_path, cfg.dtype, device)
        self.max_len = int(getattr(model.config, "max_position_embeddings", 2048))
        self.vocab_size = model.get_input_embeddings().num_embeddings  # token ids must be below it
        self.engine = HFRolloutEngine(
            model,
            eos_token_ids(self.tokenizer, model),
            self.tokenizer.pad_token_id,
            max_batch_size=cfg.max_batch,
            batch_wait_ms=cfg.batch_wait_ms,
            batch_gap_ms=cfg.batch_gap_ms,
            compile=cfg.compile,
        )
        self.model, self.device = model, device
        self.lock = self.engine._lock  # held by the engine for a whole decode batch

    async def close(self) -> None:
        await self.engine.close()


class LeftPadded(list):
    """Token ids to score left-padded in their batch (`/classify` with `padding_side: left`), for
    invariance checks: a correct server gives the same score either way, up to float noise."""


class ClassifierBackend:
    """Scores for /classify: one float32 logit per input (num_labels must be 1)."""

    def __init__(self, cfg: ServerConfig):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.device = cfg.device
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(cfg.model_path)
            model, info = AutoModelForSequenceClassification.from_pretrained(
                cfg.model_path, dtype=getattr(torch, cfg.dtype), output_loading_info=True
            )
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot load the reward model {cfg.model_path!r}: {str(exc).splitlines()[0]}") from None
        head = [k for k in info.get("missing_keys", []) if str(k).split(".")[0] in ("score", "classifier")]
        if head:
            raise ModelError(
                f"{cfg.model_path} has no trained classification head ({head[0]} would be random); "
                "a DisRM must be a *ForSequenceClassification checkpoint"
            )
        if model.config.num_labels != 1:
            raise ModelError(
                f"{cfg.model_path} has num_labels={model.config.num_labels}; a DisRM must output one score (num_labels=1)"
            )
        self.model = model.to(self.device).eval()
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.max_len = int(getattr(model.config, "max_position_embeddings", 2048))
        self.vocab_size = model.get_input_embeddings().num_embeddings  # token ids must be below it
        self.micro_batch = cfg.max_batch
        self.lock = threading.Lock()  # held for a whole batched forward
        self.batcher = DynamicBatcher(self._forward, max_batch=cfg.max_batch, max_queue=cfg.max_queue)

    def _forward(self, sequences: list[list[int]]) -> list[float]:
        """One score per sequence; a `LeftPadded` sequence is batched with the other left-padded ones."""
        left = [i for i, s in enumerate(sequences) if isinstance(s, LeftPadded)]
        if not left:
            return self._forward_side(sequences, left_pad=False)
        right = [i for i, s in enumerate(sequences) if not isinstance(s, LeftPadded)]
        scores: list[float] = [0.0] * len(sequences)
        for part, left_pad in ((right, False), (left, True)):
            for i, value in zip(part, self._forward_side([sequences[i] for i in part], left_pad) if part else []):
                scores[i] = value
        return scores

    def _forward_side(self, sequences: list[list[int]], left_pad: bool) -> list[float]:
        import torch

        scores: list[float] = []
        with self.lock, torch.inference_mode():
            for start in range(0, len(sequences), self.micro_batch):
                chunk = sequences[start : start + self.micro_batch]
                width = max(len(s) for s in chunk)
                ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for i, seq in enumerate(chunk):
                    where = slice(width - len(seq), width) if left_pad else slice(0, len(seq))
                    ids[i, where] = torch.tensor(seq)
                    mask[i, where] = 1
                # left padding: positions count real tokens only, so a row's positions do not depend on its batch-mates
                positions = (mask.cumsum(-1) - 1).clamp(min=0).to(self.device) if left_pad else None
                logits = self._last_token_logits(ids.to(self.device), mask.to(self.device), positions)
                scores.extend(logits.float().cpu().tolist())
        return scores

    def _last_token_logits(self, ids, mask, position_ids=None):
        """[b] the score at each row's last real token, found from the attention mask.

        transformers pools at the last token that is not the pad id, which is the wrong token
        when the pad id also ends a turn (pad = eos); the mask never is. Left-padded rows end at
        the last column and come with `position_ids` counted from their first real token.
        """
        import torch

        width = ids.shape[1]
        # [b] the last real position: the row's length - 1 right-padded, the last column left-padded
        last = mask.sum(-1) - 1 if position_ids is None else torch.full((len(ids),), width - 1, device=ids.device)
        head = getattr(self.model, "score", None)
        if head is None:  # other heads: trust transformers' own pooling
            return self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits[:, 0]
        hidden = self.model.base_model(
            input_ids=ids, attention_mask=mask, position_ids=position_ids
        ).last_hidden_state  # [b, T, H]
        return head(hidden[torch.arange(len(ids), device=ids.device), last])[:, 0]

    async def close(self) -> None:
        await self.batcher.close()
