"""The log-prob forward's prompt layout read from the batch's CPU copies equals the one read from its tensors."""

from __future__ import annotations

import dataclasses
import random

import torch

from rlrm.engine.actor.batch import collate
from rlrm.engine.actor.logprobs import _prompt_layout
from rlrm.inference.base import Completion


def _batch(seed: int):
    rng = random.Random(seed)
    pool = [[rng.randrange(1, 9) for _ in range(rng.randint(1, 6))] for _ in range(5)]
    pool.append([0] + pool[0])  # a real token 0 (the pad id) before a prompt: a different prompt
    completions = []
    for _ in range(rng.randint(4, 12)):
        prompt = rng.choice(pool)
        for _ in range(rng.randint(1, 4)):
            response = [rng.randrange(1, 9) for _ in range(rng.randint(1, 5))]
            completions.append(Completion(prompt, response, [0.0] * len(response), "stop"))
    return collate(completions, pad_token_id=0)


def test_the_cpu_copies_give_the_layout_the_tensors_give():
    for seed in range(40):
        batch = _batch(seed)
        assert batch.prompt_key.dtype == torch.long and batch.prompt_start.tolist() == [
            batch.prompt_length - int(row.sum()) for row in batch.attention_mask[:, : batch.prompt_length]
        ]
        rows = torch.randperm(len(batch), generator=torch.Generator().manual_seed(seed))[: max(1, len(batch) // 2)]
        for part in (batch, batch.select(rows), batch.select(torch.arange(0, min(3, len(batch))))):
            first, index, inverse = _prompt_layout(part)
            f0, i0, v0 = _prompt_layout(dataclasses.replace(part, prompt_key=None, prompt_start=None))
            assert (first, index.tolist(), inverse.tolist()) == (f0, i0.tolist(), v0.tolist()), seed
