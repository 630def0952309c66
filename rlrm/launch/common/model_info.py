"""What a server says about its model in `/get_model_info`, shared by the server that answers and the client that checks.

The trainer compares the chat template a policy server loaded with its own (a replica that renders prompts
differently would generate for another prompt than the one trained on), and tells rlrm's own engine apart
from vLLM and SGLang (its log-probs match the in-process engine's, so they need no recompute).
"""

from __future__ import annotations

import hashlib

# what the embedded server's /get_model_info calls its engine: rlrm's batched HF code, as the in-process hf backend
ENGINE_NAME = "rlrm-hf"


def chat_template_digest(tokenizer: object) -> str | None:
    """sha256 of the tokenizer's chat template (a trainer compares it with its own), or None."""
    template = getattr(tokenizer, "chat_template", None)
    return hashlib.sha256(template.encode()).hexdigest() if isinstance(template, str) else None
