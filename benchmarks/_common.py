"""What the benchmark scripts share: a random Qwen2 of a given size, and a right-padded forward.

    model = random_qwen2(vocab_size=512, hidden=128, layers=2)                     # causal LM
    disrm = random_qwen2(vocab_size=512, hidden=128, layers=2, num_labels=1)       # sequence classifier
    with torch.no_grad():
        logits = padded_forward(disrm, [[5, 6, 7], [8, 9]], pad_id=0)              # [2, 1]

The scripts import it as a sibling module (`python benchmarks/x.py` puts this folder on sys.path).
Speed does not depend on what a model learned, so random weights (seed 0) stand in for trained ones.
"""

from __future__ import annotations


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
