"""The distribution RowSampler draws from, read exactly: its inverse CDF on a grid of uniforms, against HF's warpers
(the definitions vLLM shares)."""

from __future__ import annotations

import pytest
import torch

from rlrm.inference.base import SamplingParams
from rlrm.inference.sampling import RowSampler

GRID = 20_000


def drawn_distribution(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    sampler = RowSampler([params] * GRID, list(range(GRID)), 1, "cpu")
    sampler.uniforms = ((torch.arange(GRID) + 0.5) / GRID)[:, None]
    token, _ = sampler.sample(logits[None].expand(GRID, -1).clone(), 0)
    return torch.bincount(token, minlength=logits.numel()).float() / GRID


def hf_distribution(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    x = TemperatureLogitsWarper(params.temperature)(None, logits[None].clone())
    if params.top_k > 0:
        x = TopKLogitsWarper(params.top_k)(None, x)
    if params.top_p < 1:
        x = TopPLogitsWarper(params.top_p)(None, x)
    return x.softmax(-1)[0]


@pytest.mark.parametrize(
    "logits, temperature, top_k, top_p",
    [
        # tokens 1, 2 and 3 tie for second place: top_k=2 kept tokens 0 and 1 only (the lowest ids won the tie),
        # where HF and vLLM keep every token as likely as the k-th: [0.731, 0.269, 0...] for [0.475, 0.175 x 3, 0...]
        ([2.0, 1.0, 1.0, 1.0, 0.0, -1.0, -1.5], 1.0, 2, 1.0),
        ([2.0, 1.0, 1.0, 1.0, 0.0, -1.0, -1.5], 0.7, 3, 1.0),
        ([2.0, 1.0, 1.0, 1.0, 0.0, -1.0, -1.5], 1.3, 2, 0.9),
        # top_p at a boundary without ties (which of tied tokens a top_p cut keeps is arbitrary, in HF as here)
        ([2.0, 1.2, 1.0, 0.7, 0.0, -1.0, -1.5], 1.0, -1, 0.6),
        ([2.0, 1.2, 1.0, 0.7, 0.0, -1.0, -1.5], 1.0, 5, 0.8),
    ],
)
def test_top_k_keeps_the_tokens_tied_with_the_kth_and_top_p_follows_hf(logits, temperature, top_k, top_p):
    logits = torch.tensor(logits)
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=1)
    drawn, hf = drawn_distribution(logits, params), hf_distribution(logits, params)
    assert torch.allclose(drawn, hf, atol=2e-3), (drawn.tolist(), hf.tolist())


def test_top_k_over_bf16_logits_keeps_what_hf_keeps():
    """bf16 logits upcast tie often at the k-th value (the 50th and 51st of N(0, 2.5) over Qwen's vocabulary: ~80%
    of steps)."""
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(4096, generator=generator) * 2.5).bfloat16().float()
    params = SamplingParams(temperature=1.0, top_k=50, max_new_tokens=1)
    drawn, hf = drawn_distribution(logits, params), hf_distribution(logits, params)
    assert int((hf > 0).sum()) > 50  # the case: a tie at the 50th
    assert torch.equal(drawn > 0, hf > 0)
    assert torch.allclose(drawn, hf, atol=2e-3)
