"""`rollout.compile=cudagraphs` on the stand-in GPU with the stand-in CUDA graph (tests/fixtures/stand_in_graphs.py):
the decode steps rlrm captures, replayed op by op under CUDA graphs' rules, on a machine without a GPU.

On a GPU the same checks run for real in tests/gpu/test_cuda_numbers.py and test_cuda_runs.py; a lease is rare
and short, so here every change meets the rules a captured step must keep: it reads its inputs where the capture
saw them (a buffer rebound to a new tensor is never read again), it bakes the Python numbers of the capture, and
the host cannot read the device while it is captured. A training run decoding so: tests/integration/engine/
test_stand_in_gpu.py.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch
from stand_in_gpu import DEVICE, SYNCS, stand_in_gpu
from stand_in_graphs import StandInGraph, stand_in_graphs

from rlrm.inference.decode import decode
from rlrm.inference.static_decode import StaticDecoder
from tests.unit.inference.conftest import tiny_qwen2
from tests.unit.inference.test_hf import generate, make_engine
from tests.unit.inference.test_static_decode import _assert_same, _both, _mixed_batch


@pytest.fixture
def graphs():
    with stand_in_gpu(), stand_in_graphs():
        yield DEVICE


def _capture(fn, *args):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)
    return graph, out


# the stand-in's own rules, each as CUDA has it


def test_a_replay_reads_its_inputs_where_the_capture_saw_them(graphs):
    x = torch.ones(3, device=graphs)
    graph, out = _capture(lambda x: x * 2 + 1, x)
    assert torch.isnan(out.cpu()).all()  # a capture runs nothing: its outputs wait for the first replay
    x.copy_(torch.tensor([1.0, 2.0, 3.0]))  # written in place: the replay reads it
    graph.replay()
    assert out.cpu().tolist() == [3.0, 5.0, 7.0]
    first, x = x, torch.zeros(3, device=graphs)  # a new tensor under the old name: the graph still reads the first
    graph.replay()
    assert out.cpu().tolist() == [3.0, 5.0, 7.0]
    del first  # its memory freed: on CUDA the replay would read garbage
    with pytest.raises(RuntimeError, match="freed since its capture"):
        graph.replay()


def test_a_replay_bakes_the_python_numbers_and_scalar_operands_of_the_capture(graphs):
    x = torch.zeros(2, device=graphs)
    step, scale = [5], torch.tensor(3.0)  # a 0-dim CPU tensor: an op's scalar operand, read at launch
    graph, out = _capture(lambda x: (x + step[0]) * scale, x)
    step[0], scale.fill_(4.0)
    x.fill_(1.0)
    graph.replay()
    assert out.cpu().tolist() == [18.0, 18.0]


@pytest.mark.parametrize(
    "copy",
    [
        lambda x: x + torch.tensor([1.0, 2.0]).to(x.device),
        lambda x: x + torch.tensor([1.0, 2.0], device=x.device),
        lambda x: x.copy_(torch.tensor([1.0, 2.0])),
    ],
    ids=["to", "tensor", "copy_"],
)
def test_host_data_copied_to_the_device_in_a_capture_is_refused(graphs, copy):
    with pytest.raises(RuntimeError, match="not permitted when stream is capturing"):
        _capture(copy, torch.zeros(2, device=graphs))


def test_a_capture_writes_nothing_in_place_and_its_factories_run_again_each_replay(graphs):
    counter, x = torch.zeros(1, device=graphs), torch.tensor([1.0, 2.0, 3.0], device=graphs)

    def step(counter, x):
        counter.add_(1)
        total = torch.zeros(3, device=x.device)  # made in the capture: zeros again on each replay
        return total.add_(x)

    graph, total = _capture(step, counter, x)
    assert counter.cpu().tolist() == [0.0] and torch.isnan(total.cpu()).all()
    graph.replay()
    graph.replay()
    assert counter.cpu().tolist() == [2.0] and total.cpu().tolist() == [1.0, 2.0, 3.0]


def test_a_host_read_on_another_thread_does_not_fail_a_capture(graphs):
    """static_decode captures with capture_error_mode="thread_local": the trainer's thread goes on meanwhile."""
    x, y = torch.ones(2, device=graphs), torch.ones(2, device=graphs)
    other = threading.Thread(target=lambda: float(y.sum()))

    def step(x):
        other.start()
        other.join()
        return x + 1

    graph, out = _capture(step, x)
    graph.replay()
    assert out.cpu().tolist() == [2.0, 2.0]


@pytest.mark.parametrize("read", [lambda t: t.sum().item(), lambda t: bool(t.any()), lambda t: t.tolist()])
def test_the_host_cannot_read_the_device_while_capturing(graphs, read):
    x = torch.ones(2, device=graphs)
    assert not torch.cuda.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="not permitted when stream is capturing"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            assert torch.cuda.is_current_stream_capturing()
            read(x)
    assert not torch.cuda.is_current_stream_capturing()


# the decoder's captured steps


def _decode_both(model, backend, prompts, params, seeds, stops):
    decoder = StaticDecoder(model, backend, max_batch_size=64)
    return decoder, *_both(model, decoder, prompts, params, seeds, stops)


def test_captured_decode_steps_sample_what_the_dynamic_loop_samples(graphs, capsys):
    """13 rows in a 16-row bucket, some ending on EOS: the batch moves on to an 8-row bucket, captured mid-batch.
    Every step after the first of a bucket is a replay; no host read is added to the eager backend's."""
    model = tiny_qwen2().to(graphs)
    prompts, params, seeds = _mixed_batch()
    eos = decode(model, prompts[:1], params[:1], seeds[:1], [[]], 0, threading.Event(), True)[0][0][1]
    stops = [[eos]] * len(prompts)
    reads = {}
    for backend in ("eager", "cudagraphs"):
        before = SYNCS[0]
        decoder, dynamic, static = _decode_both(model, backend, prompts, params, seeds, stops)
        _assert_same(dynamic, static)
        reads[backend] = SYNCS[0] - before
    assert any(row[2] for row in static) and not all(row[2] for row in static)
    assert list(decoder._buckets) == [(16, 64), (8, 64)] and decoder.captured == 2
    assert all(isinstance(b.graph, StandInGraph) and b.graph.replays > 0 for b in decoder._buckets.values())
    assert reads["cudagraphs"] == reads["eager"] + 2  # captures read nothing; each capture's check reads once
    assert "warning" not in capsys.readouterr().err


def test_weights_copied_in_place_reach_the_captured_step_and_moved_ones_get_a_new_capture(graphs):
    prompts, params, seeds = _mixed_batch()
    stops = [[]] * len(prompts)
    model = tiny_qwen2().to(graphs)
    decoder = StaticDecoder(model, "cudagraphs", max_batch_size=64)
    with torch.inference_mode():
        decoder.decode(prompts, params, seeds, stops, 0, threading.Event(), True)
    graph, captured = decoder._buckets[(16, 64)].graph, decoder.captured  # 16 rows, then 8: two captures
    model.load_state_dict(tiny_qwen2(seed=1).state_dict())  # an update: copied into the parameters in place
    with torch.inference_mode():
        expected = decode(model, prompts, params, seeds, stops, 0, threading.Event(), True)
        _assert_same(expected, decoder.decode(prompts, params, seeds, stops, 0, threading.Event(), True))
        assert decoder._buckets[(16, 64)].graph is graph and decoder.captured == captured  # replayed, not captured
        model.to("cpu").to(graphs)  # a server's sleep and wake: the parameters are new tensors
        _assert_same(expected, decoder.decode(prompts, params, seeds, stops, 0, threading.Event(), True))
    assert decoder._buckets[(16, 64)].graph is not graph and decoder.captured == 2 * captured


def test_a_step_that_reads_the_device_while_captured_decodes_uncompiled_saying_so(graphs, monkeypatch, capsys):
    """A forward with a branch on device data (here on the attention mask, as transformers' padding check is
    outside a static cache) makes the host read the device: CUDA refuses it inside a capture, and each bucket
    decodes uncompiled, said once."""
    forward = StaticDecoder._forward

    def branching(self, ids, mask, positions, cache):
        if bool((mask == 0).any()):  # a host read each step
            pass
        return forward(self, ids, mask, positions, cache)

    monkeypatch.setattr(StaticDecoder, "_forward", branching)
    model = tiny_qwen2().to(graphs)
    prompts, params, seeds = _mixed_batch()
    decoder, dynamic, static = _decode_both(model, "cudagraphs", prompts, params, seeds, [[]] * len(prompts))
    _assert_same(dynamic, static)
    assert decoder.captured == 0 and len(decoder._buckets) == 2
    assert all(b.graph is None for b in decoder._buckets.values())
    err = capsys.readouterr().err
    assert err.count("capturing a decode step as a CUDA graph failed") == 1 and "stream is capturing" in err


def test_a_decoder_that_rebinds_a_captured_input_fails_on_the_stand_in(graphs, monkeypatch):
    """The fault the stand-in is for: a step's input buffer rebound to a new tensor (here the token ids, each step)
    instead of written in place. The graph goes on reading the buffer it captured, whose memory is freed once
    nothing else holds it: on CUDA the rows decode from stale or garbage tokens, here the replay raises."""
    step = StaticDecoder._step

    def rebinding(self, bucket):
        bucket.ids = bucket.ids.clone()  # the next tokens go into a new tensor, not into the captured buffer
        return step(self, bucket)

    monkeypatch.setattr(StaticDecoder, "_step", rebinding)
    model = tiny_qwen2().to(graphs)
    prompts, params, seeds = _mixed_batch()
    with pytest.raises(RuntimeError, match="freed since its capture"):
        _decode_both(model, "cudagraphs", prompts, params, seeds, [[]] * len(prompts))


def test_a_servers_sleep_and_wake_drop_the_graphs_and_its_next_batch_captures_again(graphs):
    """A colocated server's sleep moves the weights to the host (`rlrm.launch.server.sleep`), so graphs captured on
    their old memory are dropped, and the first batch after the wake captures anew: it samples with the weights
    loaded after the wake, as the dynamic loop does."""
    from rlrm.inference.base import SamplingParams
    from rlrm.launch.server.sleep import SleepState

    engine = make_engine(tiny_qwen2().to(graphs), compile="cudagraphs")
    state = SleepState(engine.model, engine._lock, str(graphs), engine.release_compiled)
    prompts = [[5, 9, 12, 3]] * 4 + [[7, 3]] * 4
    params = [SamplingParams(max_new_tokens=10, temperature=1.0, seed=s) for s in range(8)]

    async def go():
        try:
            await engine.generate_many(prompts, params)
            captured = engine._static.captured
            slept = await state.sleep()
            assert slept["moved_bytes"] > 0 and next(engine.model.parameters()).device.type == "cpu"
            assert not engine._static._buckets  # dropped before the weights moved
            await state.wake_up()
            engine.update_weights(tiny_qwen2(seed=1).state_dict(), version=1)  # after the wake: copied in place
            return captured, await engine.generate_many(prompts, params)
        finally:
            await engine.close()

    captured, after = asyncio.run(go())
    assert captured == 1 and engine._static.captured == 2
    for want, got in zip(generate(make_engine(engine.model), prompts, params), after):  # the dynamic loop
        assert got.token_ids == want.token_ids
        assert got.log_probs == pytest.approx(want.log_probs, abs=1e-5)
