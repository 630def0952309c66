"""The hf rollout engine under faults: a request that makes its batch's decode raise fails alone (the batch is run
again a request at a time), out of memory is not split, seeds of any size draw, and a batch whose callers have all
given up stops within a token."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from rlrm.errors import OutOfDeviceMemory
from rlrm.inference.base import RequestFailedAlone, SamplingParams
from rlrm.inference.hf import HFRolloutEngine, _Request
from tests.unit.inference.test_hf import PROMPTS, generate, make_engine


def _poisoned(engine: HFRolloutEngine, prompt: list[int]) -> _Request:
    """A request the engine's checks would refuse, queued past them (as an input no check knows would be): its
    stop id does not fit the int64 tensor the decode loop builds of every row's stop ids."""
    sampling = SamplingParams(max_new_tokens=4, stop_token_ids=[2**70])
    return _Request(prompt, sampling, 1, asyncio.get_running_loop().create_future())


def test_a_request_that_breaks_its_batch_fails_alone_and_the_rest_draw_as_alone(model):
    samplings = [SamplingParams(max_new_tokens=6, seed=i) for i in range(len(PROMPTS))]
    alone = generate(make_engine(model), PROMPTS, samplings)
    engine = make_engine(model, batch_wait_ms=200)

    async def together():
        try:
            good = [engine._request(p, s) for p, s in zip(PROMPTS, samplings)]
            bad = _poisoned(engine, [5, 6])
            queued = [*good[:2], bad, *good[2:]]
            arrived = engine._start()
            engine._pending.extend(queued)
            arrived.set()
            return await asyncio.gather(*(r.future for r in queued), return_exceptions=True)
        finally:
            await engine.close()

    outcomes = asyncio.run(together())
    failed = outcomes.pop(2)
    assert isinstance(failed, RequestFailedAlone), failed  # its batch-mates succeeded alone: its input's fault
    assert "Overflow" in str(failed) or "overflow" in str(failed), str(failed)
    assert [o.token_ids for o in outcomes] == [a.token_ids for a in alone]  # seeded: batch-mates change nothing
    assert engine.split_batches == 1 and engine.batches_run == 1 + len(PROMPTS) + 1


def test_out_of_memory_fails_the_batch_once_naming_the_setting(model, monkeypatch):
    engine = make_engine(model, batch_wait_ms=200)
    runs = []

    def full(*args, **kwargs):
        runs.append(1)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr("rlrm.inference.hf.decode", full)
    with pytest.raises(OutOfDeviceMemory, match="lower rollout.max_batch_size"):
        generate(engine, PROMPTS, [SamplingParams(max_new_tokens=4, seed=i) for i in range(len(PROMPTS))])
    assert runs == [1] and engine.split_batches == 0  # a batch of one would hide what to lower


def test_seeds_of_any_size_draw_and_wrap_at_64_bits(model):
    top = 2**64 - 1
    outs = generate(
        make_engine(model), [[5, 9]] * 3, [SamplingParams(max_new_tokens=5, seed=s) for s in (top, 2**64, 0)]
    )
    assert outs[1].token_ids == outs[2].token_ids  # 2**64 is seed 0 to a 64-bit generator
    assert outs[0].meta["seed"] == top


def test_a_stop_id_outside_the_vocabulary_is_refused_at_once(model):
    with pytest.raises(ValueError, match="stop_token_ids holds a token id outside"):
        generate(make_engine(model), [[5, 9]], [SamplingParams(max_new_tokens=5, stop_token_ids=[64])])


def test_a_batch_whose_callers_all_gave_up_stops_within_a_token(model):
    engine = make_engine(model)
    forwards = []

    async def scenario():
        loop = asyncio.get_running_loop()
        waiting = loop.create_task(engine.generate_many(PROMPTS, SamplingParams(max_new_tokens=100, seed=3)))

        def count(*_):
            forwards.append(1)
            if len(forwards) == 5:  # decoding: the callers hang up (a server's clients, a cancelled rollout)
                loop.call_soon_threadsafe(waiting.cancel)
            time.sleep(0.01)  # a token takes a while, as on a real model: the loop sees the hang-up meanwhile

        hook = model.register_forward_hook(count)
        try:
            with pytest.raises(asyncio.CancelledError):
                await waiting
            # the next request waits for the abandoned batch to leave the decode thread, then runs
            after = len(forwards)
            await engine.generate([5, 9], SamplingParams(max_new_tokens=3, seed=1))
            return after
        finally:
            hook.remove()
            await engine.close()

    asyncio.run(scenario())
    assert len(forwards) < 5 + 3 + 3, len(forwards)  # not the 100 tokens nobody waits for


def test_a_batch_whose_every_request_fails_alone_too_is_the_engines_fault(model, monkeypatch):
    """Nobody to blame: each caller gets the engine's own error, not an input error (a server answers 500)."""
    engine = make_engine(model, batch_wait_ms=200)
    calls = []

    def broken(*args, **kwargs):
        calls.append(len(args[1]))
        raise RuntimeError("device lost")

    monkeypatch.setattr("rlrm.inference.hf.decode", broken)
    with pytest.raises(RuntimeError, match="device lost") as err:
        generate(engine, PROMPTS, [SamplingParams(max_new_tokens=4, seed=i) for i in range(len(PROMPTS))])
    assert not isinstance(err.value, RequestFailedAlone)
    assert calls == [len(PROMPTS)] + [1] * len(PROMPTS)  # the batch, then each request alone


def test_a_row_whose_caller_gave_up_leaves_the_batch_and_its_batch_mate_draws_as_alone(model):
    sampling = SamplingParams(max_new_tokens=30, seed=3)
    widths: list[int] = []

    async def scenario():
        engine = make_engine(model)
        loop = asyncio.get_running_loop()
        kept = loop.create_task(engine.generate(PROMPTS[0], sampling))
        gone = loop.create_task(engine.generate(PROMPTS[1], SamplingParams(max_new_tokens=30, seed=4)))

        def count(_module, _args, kwargs, _out):
            widths.append(kwargs["input_ids"].shape[0])
            if len(widths) == 5:  # decoding together: one caller hangs up
                loop.call_soon_threadsafe(gone.cancel)
            time.sleep(0.01)  # a token takes a while, as on a real model: the loop sees the hang-up meanwhile

        hook = model.register_forward_hook(count, with_kwargs=True)
        try:
            with pytest.raises(asyncio.CancelledError):
                await gone
            return await kept
        finally:
            hook.remove()
            await engine.close()

    together = asyncio.run(scenario())
    assert widths[:5] == [2] * 5 and widths.count(2) <= 8, widths  # the row left within a few tokens
    assert len(widths) == 30 and widths[-1] == 1  # its batch-mate decoded on to its 30 tokens, alone
    (alone,) = generate(make_engine(model), [PROMPTS[0]], [sampling])
    assert together.token_ids == alone.token_ids
    assert torch.allclose(torch.tensor(together.log_probs), torch.tensor(alone.log_probs), atol=1e-5)
