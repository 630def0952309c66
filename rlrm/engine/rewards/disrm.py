"""DisRM client: the conversation re-rendered with the reward model's chat template, scored over `/classify`.

The policy's chat template does not matter here: the reward model was trained on its own format,
so the prompt messages plus the response (decoded without EOS) are rendered again with the reward
model's template, tokenized without adding special tokens (a BOS the template already wrote is
kept once, never twice), and sent as token ids. The raw logit comes back as a float32 score.

The request and answer are the server backend's (`reward.server.backend`; rlrm/launch/fleet/backends.py
`classify_body` / `classify_scores`): vLLM's /classify (also the embedded server's) with `use_activation: false`
answers the head's raw logits in `probs`, SGLang's native /classify the same raw logits as its `embedding`; the
score is the last label's raw logit on every backend (a reward model's only one), never a probability.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from rlrm.call_errors import BadRequest
from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardFn, RewardResult, RewardSample
from rlrm.engine.rewards.errors import NonFiniteScore
from rlrm.errors import ModelError
from rlrm.launch.fleet.backends import MAX_MODEL_LEN, backend_for, model_positions


def render_conversation(tokenizer, prompt: list[dict], response: str) -> list[int]:
    """Token ids of prompt + response in the reward model's own chat format."""
    messages = list(prompt) + [{"role": "assistant", "content": response}]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def load_disrm_tokenizer(cfg: RewardConfig, model_path: str | None) -> tuple[Any, int]:
    """The reward model's tokenizer and the longest conversation it scores, in tokens.

    A tokenizer without a chat template cannot render a conversation as the model was trained on it: one
    ModelError now, not every sample failed after a step's rollout. The limit is reward.disrm.max_length, or the
    model's positions when it has fewer (the servers refuse a longer input, so `too_long: truncate` cuts there
    and says so once)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if not getattr(tokenizer, "chat_template", None):
        raise ModelError(
            f"the DisRM {model_path} has no chat template in its tokenizer, so a prompt and response cannot be "
            "rendered in the format it was trained on: set tokenizer.chat_template and save_pretrained the tokenizer "
            "into the model's folder (its tokenizer_config.json or chat_template.jinja)"
        )
    asked = cfg.disrm.max_length
    positions = _positions(model_path) if model_path else None
    launched_vllm = cfg.server.backend == "vllm" and not cfg.server.addresses and cfg.disrm.scorer == "served"
    if positions and launched_vllm:
        positions = min(positions, MAX_MODEL_LEN)  # the --max-model-len rlrm launches vLLM with
    if positions and positions < asked:
        print(
            f"note: reward.disrm.max_length={asked} is more than the {positions} tokens the DisRM takes (its "
            f"positions{f', at most {MAX_MODEL_LEN} on the vLLM servers rlrm launches' if launched_vllm else ''}): "
            f"conversations are {'cut to their last' if cfg.disrm.too_long == 'truncate' else 'refused over'} "
            f"{positions} tokens",
            file=sys.stderr,
            flush=True,
        )
        return tokenizer, positions
    return tokenizer, asked


def _positions(model_path: str) -> int | None:
    """The DisRM's positions: a local folder's config.json (one holding only the tokenizer, for servers of your own:
    none), or a hub id's config as transformers has it cached (none when it is not)."""
    if Path(model_path).expanduser().is_dir():
        return model_positions(model_path)
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model_path, local_files_only=True)
    except Exception:  # not cached, or not a model's config: the servers' own limit holds
        return None
    return int(getattr(config, "max_position_embeddings", 0) or 0) or None


def make_disrm_reward(cfg: RewardConfig, balancer, tokenizer, limit: int | None = None) -> RewardFn:
    """A reward function that scores with a served sequence classifier.

    Args:
        limit: the longest conversation sent, in tokens (`load_disrm_tokenizer`'s); None: reward.disrm.max_length.
    """
    limit = cfg.disrm.max_length if limit is None else limit
    backend = backend_for(cfg.server.backend)  # whose /classify shape the servers speak

    async def disrm_reward(sample: RewardSample) -> RewardResult:
        ids = render_conversation(tokenizer, sample.prompt, sample.solution_str)
        truncated = len(ids) > limit
        if truncated:
            if cfg.disrm.too_long == "error":
                raise BadRequest(f"sample {sample.uid}: {len(ids)} tokens, more than the DisRM takes ({limit})")
            ids = ids[-limit:]  # keep the end: the response is what is being judged
        answer = await balancer.post(
            "/classify", backend.classify_body(cfg.server.request_model, ids), cfg.server.request_timeout_s
        )
        value = backend.classify_scores(answer)[-1]
        score = np.float32(value if value is not None else np.nan)
        if not np.isfinite(score):
            raise NonFiniteScore(f"DisRM returned {value} for sample {sample.uid}")
        return RewardResult(float(score), {"disrm_score": float(score), "disrm_truncated": truncated})

    return disrm_reward
