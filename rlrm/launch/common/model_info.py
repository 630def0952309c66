"""What a server says about its model in `/get_model_info`, shared by the server that answers and the client that checks.

The trainer compares the chat template a policy server loaded with its own (a replica that renders prompts
differently would generate for another prompt than the one trained on), and tells rlrm's own engine apart
from vLLM and SGLang (its log-probs match the in-process engine's, so they need no recompute). It names the GPU
the model is on, which an NCCL weight broadcast must not share with the trainer's (`gpu_uuid`).
"""

from __future__ import annotations

import hashlib

# what the embedded server's /get_model_info calls its engine: rlrm's batched HF code, as the in-process hf backend
ENGINE_NAME = "rlrm-hf"


def chat_template_digest(tokenizer: object) -> str | None:
    """sha256 of the tokenizer's chat template (a trainer compares it with its own), or None."""
    template = getattr(tokenizer, "chat_template", None)
    return hashlib.sha256(template.encode()).hexdigest() if isinstance(template, str) else None


def gpu_uuid(device: object) -> str | None:
    """The UUID of the CUDA device `device` (a torch.device or its name; `cuda` alone: the current one), None for
    any other device. NCCL refuses a group with two members on one GPU ("Duplicate GPU detected"), so a trainer
    that broadcasts weights over NCCL compares its GPU with each replica's (`/get_model_info` reports it)."""
    import torch

    where = torch.device(device)  # type: ignore[call-overload]  # a torch.device or a name: torch takes both
    if where.type != "cuda":
        return None
    index = where.index if where.index is not None else torch.cuda.current_device()
    return str(torch.cuda.get_device_properties(index).uuid)
