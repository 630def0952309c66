"""The recipe of the tiny policy: tokenizer, architecture, and the supervised warm start.

Used by `rlrm.engine.models.tiny`; kept apart so the recipe reads top to bottom.
"""

from __future__ import annotations

import random
from typing import Callable

from rlrm.config.schema import PROMPT_SUFFIX, SyntheticConfig
from rlrm.engine.data.synthetic import synthetic_splits
from rlrm.engine.models.sft import chat_prompt, fine_tune, generate
from rlrm.engine.models.tiny_judge import JUDGE_TEMPLATE
from rlrm.engine.rewards.gsm8k import compute_score

# Qwen2's pre-tokenizer split: digits one by one, words with their leading space.
QWEN2_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
VOCAB_SIZE = 512
SFT_STEPS = 300
SFT_BATCH = 32
SFT_LR = 2e-3
# The warm start uses its own problems (a different seed from any profile's data), so a
# profile's train and test splits are equally unseen.
SFT_DATA = SyntheticConfig(num_train=6400, num_test=128, seed=987)


def _corpus(seed: int) -> list[str]:
    train, _ = synthetic_splits(SyntheticConfig(num_train=3000, num_test=1, seed=seed + 11), PROMPT_SUFFIX)
    texts = []
    for ex in train:
        texts.append(ex.prompt[0]["content"])
        texts.append(ex.extra_info["solution"])
    texts += ["system\nuser\nassistant\nYou are a helpful assistant. Score: 10 Score: 0 correct wrong"] * 20
    # The judge's instructions as whole words: its prompts take ~100 tokens instead of ~165, and its
    # build, which spends its time in forward and backward passes over them, ~0.6 of the time.
    texts += [JUDGE_TEMPLATE] * 20
    return texts


def build_tokenizer(seed: int):
    """A byte-level BPE tokenizer trained on synthetic problems, as a transformers fast tokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=512,
        padding_side="left",
    )


def new_policy(tokenizer, seed: int):
    """A freshly initialised tiny Qwen2 causal LM (about 0.6 M parameters)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def _sft_pairs(tokenizer) -> tuple[list[tuple[list[int], list[int]]], list]:
    train, test = synthetic_splits(SFT_DATA, PROMPT_SUFFIX)
    pairs = []
    for ex in train:
        answer = tokenizer(ex.extra_info["solution"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        pairs.append((chat_prompt(tokenizer, ex.prompt), answer))
    return pairs, test


def warm_start(model, tokenizer, seed: int, log: Callable[[str], None]) -> float:
    """Supervised steps on worked solutions (loss on the answer only); returns held-out accuracy."""
    pairs, test = _sft_pairs(tokenizer)
    fine_tune(
        model,
        pairs,
        steps=SFT_STEPS,
        batch=SFT_BATCH,
        lr=SFT_LR,
        pad_id=tokenizer.pad_token_id,
        rng=random.Random(seed),
        log=log,
        label="warm start",
        log_every=50,
    )
    return greedy_accuracy(model, tokenizer, test)


def greedy_accuracy(model, tokenizer, examples: list, max_new_tokens: int = 20) -> float:
    """Share of examples whose greedy answer scores 1 under the strict GSM8K rule."""
    out, width = generate(
        model, tokenizer, [ex.prompt for ex in examples], max_new_tokens=max_new_tokens, do_sample=False
    )
    texts = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    return sum(compute_score(t, ex.ground_truth) for t, ex in zip(texts, examples)) / len(examples)
