"""FSDP2 across two gloo ranks (spawned processes, rendezvous on a free port) scores like one rank."""

from __future__ import annotations

import torch

from rlrm.parity.inputs import encode_samples
from rlrm.parity.legacy import LegacyConfig
from rlrm.parity.workers import LegacyWorkerGroup


def test_world_size_two_gives_the_scores_of_world_size_one(spread_disrm_path, arithmetic_samples):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(spread_disrm_path)
    samples = arithmetic_samples[:23]  # odd: the driver pads the batch to a multiple of the world size
    enc = encode_samples(tok, samples, max_length=64)
    base = dict(model_path=str(spread_disrm_path), dtype="bf16", pad_token_id=tok.pad_token_id, threads=1,
                max_tokens_per_batch=150)  # uneven token counts per rank: the ranks agree on the micro-batch count
    with LegacyWorkerGroup(LegacyConfig(**base, world_size=1)) as one:
        single = one.score(enc.ids, enc.response_tokens)
    with LegacyWorkerGroup(LegacyConfig(**base, world_size=2)) as two:
        assert two.spawn and all(p.is_alive() for p in two._procs)
        double = two.score(enc.ids, enc.response_tokens)
        procs = list(two._procs)
    assert not any(p.is_alive() for p in procs)  # stopped by close(), by their own process objects
    assert double.token_level.dtype == torch.bfloat16 and double.token_level.shape == single.token_level.shape
    # sharding splits parameters, never a sample's arithmetic: the same bits
    assert torch.equal(double.token_level, single.token_level)
