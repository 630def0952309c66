"""Compiled decoding (`rollout.compile`): the static-cache loop samples what the dynamic loop samples, each shape
gets one bucket (cache, input buffers, step), and where compiling cannot work it says so once and decodes anyway.

Here on the CPU with the "eager" backend: the same buckets, buffers and loop as "cudagraphs", the step run
uncompiled. CUDA graphs: tests/gpu/test_cuda_numbers.py and test_cuda_runs.py; inductor (which needs a C++
compiler, so a subprocess) in a training run: tests/integration/engine/test_compiled_rollout.py (slow).
"""

from __future__ import annotations

import threading

import pytest
import torch

from rlrm.inference import packed_attention, static_decode
from rlrm.inference.base import SamplingParams
from rlrm.inference.decode import decode
from rlrm.inference.static_decode import StaticDecoder
from tests.unit.inference.conftest import tiny_qwen2
from tests.unit.inference.test_hf import PROMPTS, generate, make_engine, model_log_probs


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


def _both(model, decoder, prompts, params, seeds, stops):
    with torch.inference_mode():
        dynamic = decode(model, prompts, params, seeds, stops, 0, threading.Event(), True)
        static = decoder.decode(prompts, params, seeds, stops, 0, threading.Event(), True)
    return dynamic, static


def _assert_same(dynamic, static, atol=1e-5):
    assert [row[0] for row in static] == [row[0] for row in dynamic]
    assert [row[2] for row in static] == [row[2] for row in dynamic]
    for (tokens, log_probs, _), (_, expected, _) in zip(static, dynamic):
        assert torch.allclose(torch.tensor(log_probs), torch.tensor(expected), atol=atol), tokens


def test_the_static_loop_samples_what_the_dynamic_loop_samples(model):
    prompts, params, seeds = _mixed_batch()
    eos = decode(model, prompts[:1], params[:1], seeds[:1], [[]], 0, threading.Event(), True)[0][0][1]
    stops = [[eos]] * len(prompts)  # some rows end on it, the others run to their limits
    decoder = StaticDecoder(model, "eager", max_batch_size=64)
    dynamic, static = _both(model, decoder, prompts, params, seeds, stops)
    _assert_same(dynamic, static)
    assert any(row[2] for row in static) and not all(row[2] for row in static)
    assert list(decoder._buckets) == [(16, 64), (8, 64)]  # 13 rows in 16; at most 8 left: moved on to 8
    assert model.config._attn_implementation == packed_attention.ATTENTION  # grouped heads packed, not copied
    assert decoder.captured == 0  # eager: nothing captured or compiled


def _shrinking_batch():
    """30 rows whose number left falls from 30 to 15 (at most 4 tokens), then 7 (at most 8), then 0 (12)."""
    prompts = [PROMPTS[i % 4] + [i + 1] for i in range(30)]
    limits = [4] * 15 + [8] * 8 + [12] * 7
    params = [
        SamplingParams(temperature=(0.0, 1.0, 0.8)[i % 3], top_k=(-1, 6)[i % 2], max_new_tokens=n)
        for i, n in enumerate(limits)
    ]
    return prompts, params, list(range(200, 230))


@pytest.mark.parametrize("kept", [8, 1], ids=["ladder-kept", "in-use-bucket-dropped"])
def test_a_shrinking_batch_moves_down_the_buckets_and_samples_the_same(model, monkeypatch, kept):
    """32 rows, then 16 (15 left, one padding row), then 8 (7 left): rows that stop on EOS or at their own limit
    leave, the others decode on as in the dynamic loop, none lost or returned twice."""
    monkeypatch.setattr(static_decode, "KEPT_BUCKETS", kept)
    prompts, params, seeds = _shrinking_batch()
    eos = decode(model, prompts[:1], params[:1], seeds[:1], [[]], 0, threading.Event(), True)[0][0][2]
    decoder = StaticDecoder(model, "eager", max_batch_size=64)
    dynamic, static = _both(model, decoder, prompts, params, seeds, [[eos]] * len(prompts))
    _assert_same(dynamic, static)
    assert len(static) == 30 and any(row[2] for row in static)
    assert list(decoder._buckets) == [(32, 64), (16, 64), (8, 64)][-kept:]


def test_a_smaller_bucket_that_does_not_fit_leaves_the_batch_where_it_is(model, capsys):
    decoder = StaticDecoder(model, "eager", max_batch_size=64)
    make = decoder._bucket

    def out_of_memory_when_moving(rows, slots, empty=True):
        if not empty:
            raise torch.OutOfMemoryError("CUDA out of memory (a stand-in for a full GPU)")
        return make(rows, slots, empty)

    decoder._bucket = out_of_memory_when_moving
    prompts, params, seeds = _shrinking_batch()
    dynamic, static = _both(model, decoder, prompts, params, seeds, [[]] * len(prompts))
    _assert_same(dynamic, static)
    assert list(decoder._buckets) == [(32, 64)]
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [
        "warning: rollout.compile=eager: a smaller bucket (16 rows) did not fit in memory: the batch goes on as it is"
    ]


def test_the_compiled_engine_reports_the_models_log_probs(model):
    samplings = [SamplingParams(0.7, 0.9, 10, max_new_tokens=12, seed=i) for i in range(len(PROMPTS))]
    outs = generate(make_engine(model, compile="eager"), PROMPTS, samplings)
    for prompt, out in zip(PROMPTS, outs):
        assert len(out.token_ids) == 12 and out.finish_reason == "length"
        expected = model_log_probs(model, prompt, out.token_ids, 0.7)
        assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-4)


def test_each_shape_has_one_bucket_reused_and_the_oldest_dropped(model, monkeypatch):
    monkeypatch.setattr(static_decode, "KEPT_BUCKETS", 2)
    decoder = StaticDecoder(model, "eager", max_batch_size=48)
    assert [decoder.rows_for(n) for n in (1, 8, 9, 16, 17, 33, 48)] == [8, 8, 16, 16, 32, 48, 48]
    assert [decoder.slots_for(n) for n in (1, 64, 65, 129, 300)] == [64, 64, 128, 192, 320]

    def run(count: int, new_tokens: int = 5):
        params = [SamplingParams(temperature=0.0, max_new_tokens=new_tokens)] * count
        with torch.inference_mode():
            return decoder.decode([PROMPTS[1]] * count, params, [0] * count, [[]] * count, 0, threading.Event(), True)

    first = run(3)
    bucket = decoder._buckets[(8, 64)]
    assert run(5) == first[:1] * 5 and decoder._buckets[(8, 64)] is bucket  # same shape: reused, emptied
    run(9)  # 16 rows: a new bucket
    assert list(decoder._buckets) == [(8, 64), (16, 64)]
    run(3, new_tokens=70)  # 6 + 70 slots -> 128: another; the oldest goes
    assert list(decoder._buckets) == [(16, 64), (8, 128)]
    monkeypatch.setattr(static_decode, "KEPT_BUCKETS", 1)
    run(17)
    assert list(decoder._buckets) == [(32, 64)]


def test_weights_loaded_between_batches_reach_the_static_step(model):
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


def test_weights_moved_in_memory_make_new_buckets(model):
    """A server's sleep and wake move the weights off the GPU and back: a graph captured before would read
    memory they left, so buckets made before the move are dropped."""
    import copy

    policy = copy.deepcopy(model)
    decoder = StaticDecoder(policy, "eager", max_batch_size=8)
    prompts, params, seeds = _mixed_batch()
    _both(policy, decoder, prompts[:4], params[:4], seeds[:4], [[]] * 4)
    before = decoder._buckets[(8, 64)]
    _both(policy, decoder, prompts[:4], params[:4], seeds[:4], [[]] * 4)
    assert decoder._buckets[(8, 64)] is before  # nothing moved: reused
    with torch.no_grad():
        policy.lm_head.weight.data = policy.lm_head.weight.data.clone()  # the same values elsewhere in memory
    dynamic, static = _both(policy, decoder, prompts[:4], params[:4], seeds[:4], [[]] * 4)
    _assert_same(dynamic, static)
    assert decoder._buckets[(8, 64)] is not before


def test_a_failing_compile_decodes_uncompiled_saying_so_once(model, capsys):
    """What torch raises at its recompile limit under fullgraph (or for a step it cannot compile) ends no batch."""
    decoder = StaticDecoder(model, "eager", max_batch_size=64)

    def refuses(*args):
        raise torch._dynamo.exc.FailOnRecompileLimitHit("recompile limit reached (a stand-in for torch's)")

    decoder._compiled = refuses
    prompts, params, seeds = _mixed_batch()
    for _ in range(2):
        dynamic, static = _both(model, decoder, prompts, params, seeds, [[]] * len(prompts))
        _assert_same(dynamic, static)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [
        "warning: rollout.compile=eager: compiling a decode step failed (FailOnRecompileLimitHit): decoding uncompiled"
    ]


def test_a_sliding_window_model_decodes_with_the_dynamic_loop_saying_so(capsys):
    """Its static cache counts a Python int per token: every compiled step would be a new shape."""
    windowed = tiny_qwen2(seed=1, use_sliding_window=True, sliding_window=16, max_window_layers=0)
    decoder = StaticDecoder(windowed, "eager", max_batch_size=8)
    prompts, params, seeds = _mixed_batch()
    dynamic, static = _both(windowed, decoder, prompts[:6], params[:6], seeds[:6], [[]] * 6)
    _assert_same(dynamic, static, atol=0)
    assert decoder._buckets == {}
    assert "sliding-window or other non-static layers: decoding eagerly" in capsys.readouterr().err


def test_cuda_graphs_off_cuda_is_refused_naming_the_device(model):
    with pytest.raises(ValueError, match="needs the model on CUDA, not cpu"):
        StaticDecoder(model, "cudagraphs", max_batch_size=8)
    with pytest.raises(ValueError, match="unknown compile backend 'fast'"):
        StaticDecoder(model, "fast", max_batch_size=8)


def test_compiled_engines_decode_on_one_thread_across_restarts_and_engines(model):
    """TorchInductor's CUDA graphs assert in a thread other than the one that first ran them (pytorch#123177): an
    engine closed and used again, and a second engine, decode on the first one's thread. A plain engine keeps its
    own thread, which close() ends."""
    threads = []
    hook = model.register_forward_hook(lambda *_: threads.append(threading.current_thread()))
    greedy = [SamplingParams(temperature=0.0, max_new_tokens=2)]
    try:
        engine = make_engine(model, compile="eager")
        generate(engine, PROMPTS[:1], greedy)  # generate() closes the engine after its requests
        generate(engine, PROMPTS[:1], greedy)  # started again after close
        generate(make_engine(model, compile="eager"), PROMPTS[:1], greedy)
        compiled = set(threads)
        threads.clear()
        generate(make_engine(model), PROMPTS[:1], greedy)
        generate(make_engine(model), PROMPTS[:1], greedy)
    finally:
        hook.remove()
    assert len(compiled) == 1 and threading.main_thread() not in compiled
    (shared,) = compiled
    assert shared.is_alive() and len(set(threads)) == 2 and shared not in threads
