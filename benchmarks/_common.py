"""What the benchmark scripts share: a random Qwen2 of a given size, and a right-padded forward.

    model = random_qwen2(vocab_size=512, hidden=128, layers=2)                     # causal LM
    disrm = random_qwen2(vocab_size=512, hidden=128, layers=2, num_labels=1)       # sequence classifier
    with torch.no_grad():
        logits = padded_forward(disrm, [[5, 6, 7], [8, 9]], pad_id=0)              # [2, 1]

The scripts import it as a sibling module (`python benchmarks/x.py` puts this folder on sys.path).
Speed does not depend on what a model learned, so random weights (seed 0) stand in for trained ones.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def random_qwen2(
    vocab_size: int,
    hidden: int,
    layers: int,
    num_labels: int | None = None,
    heads: int = 4,
    kv_heads: int = 2,
    pad_token_id: int | None = None,
):
    """A randomly initialised Qwen2 (seed 0), MLP 4x `hidden`, 512 positions: a causal LM, or a
    sequence classifier with `num_labels` outputs."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForSequenceClassification

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=512,
        pad_token_id=pad_token_id,
        **({"num_labels": num_labels} if num_labels is not None else {}),
    )
    return (Qwen2ForCausalLM if num_labels is None else Qwen2ForSequenceClassification)(config).eval()


def padded_forward(model, sequences: list[list[int]], pad_id: int):
    """The model's logits for `sequences`, right-padded into one batch (as the servers pad); the
    caller picks the grad mode (no_grad or inference_mode, as what it compares with does)."""
    from rlrm.engine.models.sft import right_pad

    ids, mask = right_pad(sequences, pad_id)
    return model(input_ids=ids, attention_mask=mask).logits


# Named shapes of real models, for speed and memory at a real size without downloading weights.
SHAPES = {
    "qwen2.5-0.5b": dict(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
}


def shaped_qwen2(shape: str, vocab_size: int, **config):
    """A random-weight (seed 0) Qwen2 causal LM of a named shape (`SHAPES`) and vocabulary; `config` adds to it."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if shape not in SHAPES:
        raise SystemExit(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab_size, **config, **SHAPES[shape]))


def shaped_policy(shape: str, tokenizer_dir, out_dir) -> str:
    """`shaped_qwen2` with the tokenizer of `tokenizer_dir` (its vocabulary: Qwen2.5-0.5B's shape with the tiny
    tokenizer has 358 M parameters), saved into `out_dir`."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    model = shaped_qwen2(shape, len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    model.save_pretrained(str(out_dir))
    tok.save_pretrained(str(out_dir))
    generation = Path(tokenizer_dir) / "generation_config.json"  # the EOS tokens generation stops on
    if generation.exists():
        shutil.copy(generation, Path(out_dir) / "generation_config.json")
    return str(out_dir)


def sync(device: str) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously): a timer read after it times the work."""
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
