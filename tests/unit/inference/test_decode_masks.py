"""The dynamic decode loop's attention masks: each step passes the mask transformers would build, built without
reading the device, and the tokens and log-probs are those of each prompt decoded alone (no padding, no mask)."""

from __future__ import annotations

import threading

import pytest
import torch

from rlrm.inference.base import SamplingParams
from rlrm.inference.decode import decode, mask_form, prefill, step_mask
from tests.unit.inference.conftest import tiny_qwen2
from tests.unit.inference.test_hf import PROMPTS, model_log_probs


def _decode(model, prompts, new_tokens=10):
    greedy = [SamplingParams(temperature=0.0, max_new_tokens=new_tokens)] * len(prompts)
    with torch.inference_mode():
        return decode(model, prompts, greedy, [0] * len(prompts), [[]] * len(prompts), 0, threading.Event(), True)


@pytest.mark.parametrize(
    ("implementation", "config", "form"),
    [
        ("sdpa", {}, "bool"),
        ("eager", {}, "additive"),
        # a window: transformers builds the mask (a window narrower than the sequences, so it matters)
        ("sdpa", {"use_sliding_window": True, "sliding_window": 6, "max_window_layers": 0}, "2d"),
    ],
)
def test_a_padded_batch_decodes_as_each_prompt_alone(implementation, config, form):
    model = tiny_qwen2(seed=3, attn_implementation=implementation, **config)
    with torch.inference_mode():
        _, past, _ = prefill(model, PROMPTS, 0, torch.device("cpu"), True)
    assert mask_form(model, past, padded=True) == form
    assert mask_form(model, past, padded=False) == "none"

    batch = _decode(model, PROMPTS)
    for prompt, (tokens, log_probs, _) in zip(PROMPTS, batch):
        assert tokens == _decode(model, [prompt])[0][0]
        expected = model_log_probs(model, prompt, tokens)
        assert torch.allclose(torch.tensor(log_probs), expected, atol=1e-5)


@pytest.mark.parametrize(
    ("form", "dtype"), [("bool", torch.float32), ("additive", torch.float32), ("additive", torch.bfloat16)]
)
def test_a_step_mask_is_the_one_transformers_builds(form, dtype):
    """The same [B, 1, 1, L] mask as transformers' sdpa_mask (bool) and eager_mask (0 or the dtype's minimum) for
    a one-token query over left-padded rows."""
    from transformers.masking_utils import eager_mask, sdpa_mask

    padding = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]])
    builder = sdpa_mask if form == "bool" else eager_mask
    kwargs = {} if form == "bool" else {"dtype": dtype}
    # the cache position of the query token: the last slot; allow_is_causal_skip off, so it builds the mask
    expected = builder(
        batch_size=3,
        q_length=1,
        kv_length=5,
        q_offset=4,
        kv_offset=0,
        attention_mask=padding.bool(),
        allow_is_causal_skip=False,
        **kwargs,
    )
    got = step_mask(padding, form, dtype)
    assert got.dtype == expected.dtype and got.shape == expected.shape == (3, 1, 1, 5)
    assert torch.equal(got, expected)


def test_a_model_that_reads_the_2d_mask_itself_gets_it():
    """Bloom builds its ALiBi position bias from the 2D mask: a prepared [B, 1, 1, L] mask would break it, so
    transformers builds its mask as before (given a prepared one, a padded batch fails in Bloom's forward)."""
    from transformers import BloomConfig, BloomForCausalLM

    torch.manual_seed(0)
    model = BloomForCausalLM(BloomConfig(vocab_size=64, hidden_size=32, n_layer=2, n_head=4)).eval()
    with torch.inference_mode():
        _, past, _ = prefill(model, PROMPTS, 0, torch.device("cpu"), False)
    assert mask_form(model, past, padded=True) == "2d"

    greedy = [SamplingParams(temperature=0.0, max_new_tokens=6)] * len(PROMPTS)
    with torch.inference_mode():
        batch = decode(model, PROMPTS, greedy, [0] * 4, [[]] * 4, 0, threading.Event(), False)
        for prompt, (tokens, _, _) in zip(PROMPTS, batch):
            alone = decode(model, [prompt], greedy[:1], [0], [[]], 0, threading.Event(), False)
            assert tokens == alone[0][0]
