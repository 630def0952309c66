"""Compiled decoding (`rollout.compile`): the static-cache loop samples what the dynamic loop samples, its step
compiles whole and once per bucket, and its caches are reused.

Here on the CPU with torch.compile's "eager" backend: dynamo traces the step exactly as for CUDA graphs
(`fullgraph=True`: a graph break or a host sync inside the step fails the test) and runs it uncompiled. The
same code with CUDA graphs: tests/gpu/test_cuda_numbers.py; with inductor on the CPU, in a training run:
tests/integration/engine/test_compiled_rollout.py (slow).
"""

from __future__ import annotations

import threading

import pytest
import torch

from rlrm.inference import static_decode
from rlrm.inference.base import SamplingParams
from rlrm.inference.decode import decode
from rlrm.inference.static_decode import StaticDecoder
from tests.unit.inference.test_hf import PROMPTS, generate, make_engine, model_log_probs


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test counts its own compiles (dynamo's caches and counters are per process)."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


def _mixed_batch():
    """Groups sharing a prompt, every sampling control, greedy rows, rows of other lengths."""
    prompts = [PROMPTS[i % 4] + [i % 60 + 1] * (i % 3) for i in range(13)]
    params = [
        SamplingParams(
            temperature=(0.0, 1.0, 0.7)[i % 3], top_k=(-1, 5)[i % 2], top_p=(1.0, 0.9)[i % 2], max_new_tokens=3 + i % 9
        )
        for i in range(13)
    ]
    return prompts, params, list(range(100, 113))


def _compiled_steps() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def test_the_static_loop_samples_what_the_dynamic_loop_samples(model):
    prompts, params, seeds = _mixed_batch()
    eos = decode(model, prompts[:1], params[:1], seeds[:1], [[]], 0, threading.Event(), True)[0][0][1]
    stops = [[eos]] * len(prompts)  # some rows end on it, the others run to their limits
    with torch.inference_mode():
        dynamic = decode(model, prompts, params, seeds, stops, 0, threading.Event(), True)
        static = StaticDecoder(model, "eager", max_batch_size=64).decode(
            prompts, params, seeds, stops, 0, threading.Event(), True
        )
    assert [row[0] for row in static] == [row[0] for row in dynamic]
    assert [row[2] for row in static] == [row[2] for row in dynamic]
    assert any(row[2] for row in static) and not all(row[2] for row in static)
    for (tokens, log_probs, _), (_, expected, _) in zip(static, dynamic):
        assert torch.allclose(torch.tensor(log_probs), torch.tensor(expected), atol=1e-5), tokens
    assert _compiled_steps() == 1  # the whole step is one graph: no break, no host sync inside it


def test_the_compiled_engine_reports_the_models_log_probs(model):
    samplings = [SamplingParams(0.7, 0.9, 10, max_new_tokens=12, seed=i) for i in range(len(PROMPTS))]
    outs = generate(make_engine(model, compile="eager"), PROMPTS, samplings)
    for prompt, out in zip(PROMPTS, outs):
        assert len(out.token_ids) == 12 and out.finish_reason == "length"
        expected = model_log_probs(model, prompt, out.token_ids, 0.7)
        assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-4)


def test_each_bucket_compiles_once_and_keeps_its_cache(model, monkeypatch):
    decoder = StaticDecoder(model, "eager", max_batch_size=48)
    assert [decoder.rows_for(n) for n in (1, 8, 9, 16, 17, 33, 48)] == [8, 8, 16, 16, 32, 48, 48]

    def run(count: int, new_tokens: int = 5):
        params = [SamplingParams(temperature=0.0, max_new_tokens=new_tokens)] * count
        with torch.inference_mode():
            return decoder.decode([PROMPTS[1]] * count, params, [0] * count, [[]] * count, 0, threading.Event(), True)

    first = run(3)
    cache = decoder._caches[(8, 64)]
    assert run(5) == first[:1] * 5 and decoder._caches[(8, 64)] is cache  # same bucket: reused, emptied
    assert _compiled_steps() == 1
    run(9)  # 16 rows: a new bucket
    run(3, new_tokens=70)  # 6 + 70 slots -> 128: another
    assert _compiled_steps() == 3 and list(decoder._caches) == [(8, 64), (16, 64), (8, 128)]
    monkeypatch.setattr(static_decode, "KEPT_CACHES", 2)
    run(17)
    assert list(decoder._caches) == [(8, 128), (32, 64)]  # the oldest dropped


def test_weights_loaded_between_batches_reach_the_compiled_step(model):
    """New weights are copied into the same tensors (`load_state_dict`), so a captured graph reads them."""
    import copy

    policy = copy.deepcopy(model)
    engine = make_engine(policy, compile="eager")
    greedy = [SamplingParams(temperature=0.0, max_new_tokens=8)]
    before = generate(engine, PROMPTS[:1], greedy)[0]
    weights = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items()}
    engine.update_weights(weights, version=1)
    after = generate(engine, PROMPTS[:1], greedy)[0]
    policy_again = copy.deepcopy(model)
    policy_again.load_state_dict(weights)
    expected = generate(make_engine(policy_again), PROMPTS[:1], greedy)[0]
    assert after.policy_version == 1 and after.token_ids == expected.token_ids != before.token_ids


def test_cuda_graphs_off_cuda_is_refused_naming_the_device(model):
    with pytest.raises(ValueError, match="needs the model on CUDA, not cpu"):
        StaticDecoder(model, "cudagraphs", max_batch_size=8)
    with pytest.raises(ValueError, match="unknown compile backend 'fast'"):
        StaticDecoder(model, "fast", max_batch_size=8)
