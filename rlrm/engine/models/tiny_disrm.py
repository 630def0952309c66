"""The tiny DisRM recipe: a Qwen2 sequence classifier (num_labels=1) whose body starts from the
warm-started tiny policy (as real reward models start from an SFT model), trained with BCE on
correct vs near-miss answers rendered exactly as the DisRM client renders them."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Callable

STEPS = 600
BATCH = 32
LR = 3e-4
NUM_TRAIN, NUM_TEST = 4000, 256


def build_disrm(dest: Path, seed: int, log: Callable[[str], None], policy_dir: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2ForSequenceClassification

    from rlrm.engine.models.tiny_rewards_data import labelled_pairs, roc_auc
    from rlrm.engine.rewards.disrm import render_conversation

    start = time.perf_counter()
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(policy_dir)
    policy = AutoModelForCausalLM.from_pretrained(policy_dir)
    config = policy.config
    config.num_labels, config.pad_token_id = 1, tok.pad_token_id
    model = Qwen2ForSequenceClassification(config)
    model.model.load_state_dict(policy.model.state_dict())  # the body; the score head starts fresh
    train, test = labelled_pairs(seed, NUM_TRAIN, NUM_TEST)
    encode = lambda pairs: [(render_conversation(tok, ex.prompt, resp), y) for ex, resp, y in pairs]  # noqa: E731
    train, test = encode(train), encode(test)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    rng = random.Random(seed)
    model.train()
    for step in range(STEPS):
        batch = rng.sample(train, BATCH)
        logits = _scores(model, [ids for ids, _ in batch], tok.pad_token_id)
        labels = torch.tensor([float(y) for _, y in batch])
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if (step + 1) % 100 == 0:
            log(f"  disrm step {step + 1}/{STEPS}  loss {loss.item():.3f}")
    model.eval()
    with torch.no_grad():
        scores = _scores(model, [ids for ids, _ in test], tok.pad_token_id).tolist()
    auc = roc_auc(scores, [y for _, y in test])
    model.save_pretrained(dest)
    tok.save_pretrained(dest)
    return {"auc": round(auc, 4), "build_s": round(time.perf_counter() - start, 1),
            "parameters": sum(p.numel() for p in model.parameters())}


def _scores(model, sequences: list[list[int]], pad_id: int):
    import torch

    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return model(input_ids=ids, attention_mask=mask).logits[:, 0]
