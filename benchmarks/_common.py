"""Helpers the benchmark scripts share (imported as `from _common import ...`: a script's folder is on sys.path).

    model = random_qwen2(hidden=128, layers=2)                       # a causal LM in memory
    path = save_random_qwen2(folder, classifier=True, tokenizer_path=tiny_policy)   # a DisRM folder

A random tiny Qwen2 stands in where speed, not what the model learned, is measured. Heads are 32
wide (`hidden // 32` query heads, half as many key/value heads), as in the tiny policy.
"""

from __future__ import annotations

from pathlib import Path


def random_qwen2(
    hidden: int = 128, layers: int = 2, vocab_size: int = 512, classifier: bool = False,
    pad_token_id: int | None = None, seed: int = 0,
):
    """A randomly initialised Qwen2 causal LM, or sequence classifier with one score, in eval mode."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForSequenceClassification

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 32), num_key_value_heads=max(1, hidden // 64),
        max_position_embeddings=512, pad_token_id=pad_token_id, **({"num_labels": 1} if classifier else {}),
    )
    return (Qwen2ForSequenceClassification if classifier else Qwen2ForCausalLM)(config).eval()


def save_random_qwen2(folder: Path, tokenizer_path: str | None = None, **kwargs) -> Path:
    """`random_qwen2(**kwargs)` saved to `folder`; with `tokenizer_path`, its tokenizer's vocabulary and pad id are
    used and the tokenizer is saved beside the model."""
    tok = None
    if tokenizer_path is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer_path)
        kwargs = {**kwargs, "vocab_size": len(tok), "pad_token_id": tok.pad_token_id}
    random_qwen2(**kwargs).save_pretrained(folder)
    if tok is not None:
        tok.save_pretrained(folder)
    return Path(folder)
