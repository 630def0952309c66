"""What the embedded server runs: a causal LM (policy, genrm) or a sequence classifier (disrm).

The generative side reuses the rollout engine (dynamic batching, seeded sampling, log-probs);
the classifier side is a right-padded batched forward that returns the logit at each sequence's
last real token, in float32.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from rlrm.errors import ModelError
from rlrm.inference.hf import HFRolloutEngine
from rlrm.inference.loading import eos_token_ids, load_causal_lm, load_tokenizer, pick_device
from rlrm.launch.batcher import DynamicBatcher

GENERATIVE_ROLES = ("policy", "genrm")
ROLES = GENERATIVE_ROLES + ("disrm",)


@dataclass
class ServerConfig:
    model_path: str
    role: str = "genrm"  # policy | genrm | disrm
    dtype: str = "float32"
    max_batch: int = 64
    max_queue: int = 1024
    api_key: str | None = None
    served_model_name: str | None = None
    device: str = "auto"
    wait_for_weights: bool = False  # policy replica restarted by a fleet: 503 until its first weight update
    batch_wait_ms: float = 2.0  # the longest a generation batch waits for more requests after its first
    batch_gap_ms: float | None = None  # close it sooner once no request arrived for this long

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model_path


class CausalLMBackend:
    """Generation for /v1/completions, /v1/chat/completions and /generate."""

    def __init__(self, cfg: ServerConfig):
        device = pick_device(cfg.device)
        self.tokenizer = load_tokenizer(cfg.model_path)
        model = load_causal_lm(cfg.model_path, cfg.dtype, device)
        self.max_len = int(getattr(model.config, "max_position_embeddings", 2048))
        self.vocab_size = model.get_input_embeddings().num_embeddings  # token ids must be below it
        self.engine = HFRolloutEngine(
            model, eos_token_ids(self.tokenizer, model), self.tokenizer.pad_token_id, max_batch_size=cfg.max_batch,
            batch_wait_ms=cfg.batch_wait_ms, batch_gap_ms=cfg.batch_gap_ms,
        )
        self.model, self.device = model, device
        self.lock = self.engine._lock  # held by the engine for a whole decode batch

    async def close(self) -> None:
        await self.engine.close()


class ClassifierBackend:
    """Scores for /classify: one float32 logit per input (num_labels must be 1)."""

    def __init__(self, cfg: ServerConfig):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.device = pick_device(cfg.device)
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
        import torch

        scores: list[float] = []
        with self.lock, torch.inference_mode():
            for start in range(0, len(sequences), self.micro_batch):
                chunk = sequences[start : start + self.micro_batch]
                width = max(len(s) for s in chunk)
                ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for i, seq in enumerate(chunk):
                    ids[i, : len(seq)] = torch.tensor(seq)
                    mask[i, : len(seq)] = 1
                scores.extend(self._last_token_logits(ids.to(self.device), mask.to(self.device)).float().cpu().tolist())
        return scores

    def _last_token_logits(self, ids, mask):
        """[b] the score at each row's last real token, found from the attention mask.

        transformers pools at the last token that is not the pad id, which is the wrong token
        when the pad id also ends a turn (pad = eos); the mask never is.
        """
        import torch

        last = mask.sum(-1) - 1  # [b] right padding: the last real position
        head = getattr(self.model, "score", None)
        if head is None:  # other heads: trust transformers' own pooling
            return self.model(input_ids=ids, attention_mask=mask).logits[:, 0]
        hidden = self.model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state  # [b, T, H]
        return head(hidden[torch.arange(len(ids), device=ids.device), last])[:, 0]

    async def close(self) -> None:
        await self.batcher.close()
