"""The hf rollout engine: log-probs, sampling controls, seeded batching, EOS, weight updates, errors.

A tiny random Qwen2 (vocab 64) and raw token ids; expected values come from the model's own
forward passes and from `model.generate`.
"""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch

from rlrm.inference.base import EngineClosedError, SamplingParams
from rlrm.inference.hf import HFRolloutEngine
from tests.unit.inference.conftest import VOCAB

PROMPTS = [[5, 9, 12], [7, 3, 3, 3, 8, 1], [11], [2, 4, 6, 8]]


def make_engine(model, eos=(), **kw):
    return HFRolloutEngine(model, eos_token_ids=list(eos), pad_token_id=0, **kw)


def generate(engine, prompts, samplings):
    """Run requests concurrently on a fresh event loop, then close the engine."""

    async def go():
        try:
            return await engine.generate_many(prompts, samplings)
        finally:
            await engine.close()

    return asyncio.run(go())


def alone(model, prompt, sampling, eos=()):
    return generate(make_engine(model, eos), [prompt], [sampling])[0]


def model_log_probs(model, prompt, tokens, temperature=1.0):
    """Log-probs of `tokens` after `prompt` from one full forward pass: [len(tokens)]."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1] / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)


@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [(1.0, -1, 1.0), (0.7, -1, 1.0), (0.7, 10, 0.9)])
def test_log_probs_equal_the_models(model, temperature, top_k, top_p):
    # filtering changes which tokens are drawn, never the reported log-probs (taken before it)
    sampling = [SamplingParams(temperature, top_p, top_k, max_new_tokens=12, seed=i) for i in range(len(PROMPTS))]
    outs = generate(make_engine(model), PROMPTS, sampling)
    for prompt, out in zip(PROMPTS, outs):
        assert len(out.token_ids) == 12 and out.finish_reason == "length"
        expected = model_log_probs(model, prompt, out.token_ids, temperature)
        assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-4)


def test_greedy_matches_hf_generate_in_one_batch(model):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=10)
    engine = make_engine(model)
    outs = generate(engine, PROMPTS, [greedy] * len(PROMPTS))
    assert engine.batches_run == 1
    for prompt, out in zip(PROMPTS, outs):
        ref = model.generate(torch.tensor([prompt]), max_new_tokens=10, min_new_tokens=10, do_sample=False)
        assert out.token_ids == ref[0, len(prompt) :].tolist()
        assert torch.allclose(torch.tensor(out.log_probs), model_log_probs(model, prompt, out.token_ids), atol=1e-4)
    # top-k 1 and a tiny top-p leave only the best token, whatever the seed and temperature
    narrow = [
        SamplingParams(temperature=1.3, top_k=1, max_new_tokens=10, seed=3),
        SamplingParams(temperature=1.0, top_p=1e-6, max_new_tokens=10, seed=4),
    ]
    for out in generate(make_engine(model), [PROMPTS[1]] * 2, narrow):
        assert out.token_ids == outs[1].token_ids


def test_seeded_request_is_independent_of_its_batch(model):
    plain = SamplingParams(temperature=1.0, max_new_tokens=12, seed=1234)
    filtered = SamplingParams(temperature=0.8, top_k=8, top_p=0.9, max_new_tokens=12, seed=77)
    # a crowd with other lengths, temperatures and filters: rows finish early and the batch shrinks
    crowd_prompts = [PROMPTS[i % 4] + [i % 60 + 1] * (i % 3) for i in range(64)]
    crowd = [
        SamplingParams(temperature=0.5 + 0.1 * (i % 5), top_k=(-1, 5)[i % 2], max_new_tokens=2 + i % 7, seed=i)
        for i in range(64)
    ]
    crowd_prompts[9], crowd[9] = PROMPTS[0], plain
    crowd_prompts[4], crowd[4] = PROMPTS[3], filtered
    engine = make_engine(model, max_batch_size=64)
    outs = generate(engine, crowd_prompts, crowd)
    assert engine.batches_run == 1
    assert outs[9].token_ids == alone(model, PROMPTS[0], plain).token_ids
    assert outs[4].token_ids == alone(model, PROMPTS[3], filtered).token_ids
    assert [len(o.token_ids) for o in outs] == [s.max_new_tokens for s in crowd]
    other_seed = alone(model, PROMPTS[0], SamplingParams(max_new_tokens=12, seed=99))
    assert other_seed.token_ids != outs[9].token_ids


def test_a_group_sharing_a_prompt_samples_as_its_requests_alone(model):
    # 4 samples of each prompt, interleaved: each distinct prompt is prefilled once, then copied
    prompts = [PROMPTS[i % 4] for i in range(16)]
    samplings = [SamplingParams(temperature=1.0, max_new_tokens=8, seed=100 + i) for i in range(16)]
    engine = make_engine(model, max_batch_size=16)
    outs = generate(engine, prompts, samplings)
    assert engine.batches_run == 1 and len({tuple(o.token_ids) for o in outs}) > 4
    for prompt, sampling, out in zip(prompts, samplings, outs):
        assert out.token_ids == alone(model, prompt, sampling).token_ids
        assert torch.allclose(torch.tensor(out.log_probs), model_log_probs(model, prompt, out.token_ids), atol=1e-4)


@pytest.fixture(scope="module")
def peaky_model(model):
    """The tiny model with sharper next-token distributions (a random one's are near uniform)."""
    sharp = copy.deepcopy(model)
    with torch.no_grad():
        sharp.lm_head.weight.mul_(30.0)
    return sharp


def _first_token_frequencies(model, sampling, count=2048):
    """Empirical distribution [V] of the first token over `count` seeds, and the model's [V]."""
    prompt = PROMPTS[1]
    samplings = [SamplingParams(sampling.temperature, sampling.top_p, sampling.top_k, 1, seed=i) for i in range(count)]
    outs = generate(make_engine(model), [prompt] * count, samplings)
    tokens = torch.tensor([o.token_ids[0] for o in outs])
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([prompt])).logits[0, -1] / sampling.temperature, -1)
    return torch.bincount(tokens, minlength=VOCAB).float() / count, probs


def _renormalised(probs, keep):
    expected = torch.zeros(VOCAB)
    expected[keep] = probs[keep] / probs[keep].sum()
    return expected


def test_sampling_follows_the_distribution(peaky_model):
    # total variation from the exact distribution: 2048 draws leave ~0.04 of noise; a biased
    # sampler (say, an off-by-one in the inverse CDF) lands above 0.2
    freq, probs = _first_token_frequencies(peaky_model, SamplingParams(temperature=1.0))
    assert 0.5 * (freq - probs).abs().sum() < 0.08

    freq, probs = _first_token_frequencies(peaky_model, SamplingParams(temperature=1.0, top_k=3))
    top = probs.topk(3).indices  # top-k keeps 3 tokens and renormalises
    assert freq[top].sum() == 1.0 and 0.5 * (freq - _renormalised(probs, top)).abs().sum() < 0.08

    freq, probs = _first_token_frequencies(peaky_model, SamplingParams(temperature=1.0, top_p=0.5))
    ordered = probs.sort(descending=True).values
    kept = int(((ordered.cumsum(0) - ordered) < 0.5).sum())  # fewest best tokens reaching 0.5
    top = probs.topk(kept).indices
    assert 1 < kept < VOCAB and freq[top].sum() == 1.0
    assert 0.5 * (freq - _renormalised(probs, top)).abs().sum() < 0.08


def test_requests_are_batched(model):
    engine = make_engine(model, max_batch_size=8, batch_wait_ms=50)
    sampling = [SamplingParams(max_new_tokens=4, seed=i) for i in range(16)]
    generate(engine, [PROMPTS[i % 4] for i in range(16)], sampling)
    assert engine.batches_run == 2  # 16 requests, 8 per batch


def test_stops_on_eos_and_includes_it(model):
    greedy = SamplingParams(temperature=0, max_new_tokens=6)
    free = alone(model, PROMPTS[2], greedy)
    eos = free.token_ids[2]
    first = free.token_ids.index(eos)
    out = alone(model, PROMPTS[2], greedy, eos=(eos,))
    assert out.token_ids == free.token_ids[: first + 1] and out.finish_reason == "stop"
    assert out.log_probs == free.log_probs[: first + 1]
    assert free.finish_reason == "length" and len(free.token_ids) == 6
    # a request's own stop ids work the same way, next to the engine's EOS
    own = alone(model, PROMPTS[2], SamplingParams(temperature=0, max_new_tokens=6, stop_token_ids=[eos]), eos=(63,))
    assert own.token_ids == out.token_ids and own.finish_reason == "stop"


def test_rows_that_finish_leave_without_changing_the_others(model):
    # the greedy continuations define an EOS that ends some rows early; the survivors must decode
    # exactly as they would alone after the batch shrinks
    eos = alone(model, PROMPTS[0], SamplingParams(temperature=0, max_new_tokens=9)).token_ids[1]
    sampling = [
        SamplingParams(temperature=0, max_new_tokens=9),
        SamplingParams(temperature=1.0, max_new_tokens=2, seed=5),
        SamplingParams(temperature=1.0, max_new_tokens=9, seed=6),
        SamplingParams(temperature=0, max_new_tokens=5),
    ]
    outs = generate(make_engine(model, eos=(eos,)), PROMPTS, sampling)
    for prompt, s, out in zip(PROMPTS, sampling, outs):
        single = alone(model, prompt, s, eos=(eos,))
        assert out.token_ids == single.token_ids and out.finish_reason == single.finish_reason
        assert torch.allclose(torch.tensor(out.log_probs), torch.tensor(single.log_probs), atol=1e-5)
    assert outs[0].finish_reason == "stop" and outs[0].token_ids[-1] == eos and len(outs[1].token_ids) <= 2


def test_update_weights_changes_outputs_and_version(model):
    engine = make_engine(copy.deepcopy(model))
    greedy = SamplingParams(temperature=0, max_new_tokens=8)

    async def scenario():
        before = await engine.generate(PROMPTS[1], greedy)
        torch.manual_seed(1)
        state = {k: v + 0.5 * torch.randn_like(v) for k, v in engine.model.state_dict().items()}
        engine.update_weights(state, version=7)
        after = await engine.generate(PROMPTS[1], greedy)
        await engine.close()
        return before, after

    before, after = asyncio.run(scenario())
    assert before.policy_version == 0 and after.policy_version == 7
    assert before.token_ids != after.token_ids


def test_weights_sent_mid_batch_apply_after_it(model):
    engine = make_engine(copy.deepcopy(model))
    new_state = {k: v + 0.5 for k, v in engine.model.state_dict().items()}
    long = SamplingParams(temperature=0, max_new_tokens=100)

    async def scenario():
        first = asyncio.ensure_future(engine.generate(PROMPTS[1], long))
        while engine.batches_run == 0:  # the batch is being decoded in the worker thread
            await asyncio.sleep(0.0005)
        engine.update_weights(new_state, version=3)  # waits for the batch to end
        done = await first
        second = await engine.generate(PROMPTS[1], long)
        await engine.close()
        return done, second

    done, second = asyncio.run(scenario())
    assert done.policy_version == 0 and done.token_ids == alone(model, PROMPTS[1], long).token_ids
    assert second.policy_version == 3 and second.token_ids != done.token_ids


def test_event_loop_stays_free_while_decoding(model):
    engine = make_engine(model)

    async def scenario():
        request = asyncio.ensure_future(engine.generate(PROMPTS[1], SamplingParams(max_new_tokens=120, seed=0)))
        ticks = 0
        while not request.done():
            await asyncio.sleep(0.001)
            ticks += 1
        await engine.close()
        return ticks

    assert asyncio.run(scenario()) >= 5  # the loop ran other work all along


def test_bad_requests_fail_at_once(model):
    engine = make_engine(model)
    with pytest.raises(ValueError, match="empty prompt"):
        asyncio.run(engine.generate([], SamplingParams()))
    with pytest.raises(ValueError, match="exceeds the model's 128 positions"):
        asyncio.run(engine.generate([1] * 120, SamplingParams(max_new_tokens=20)))
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        asyncio.run(engine.generate([1, VOCAB], SamplingParams()))
    with pytest.raises(ValueError, match="empty prompt"):
        generate(engine, [PROMPTS[0], []], [SamplingParams(seed=1)] * 2)  # the good one is not sent either
    with pytest.raises(ValueError, match="2 prompts but 1 sampling"):
        generate(engine, PROMPTS[:2], [SamplingParams()])
    assert engine.batches_run == 0
    for bad in ({"temperature": -0.1}, {"top_p": 0.0}, {"top_k": -2}, {"max_new_tokens": 0}):
        with pytest.raises(ValueError):
            SamplingParams(**bad)


def test_decode_errors_reach_every_caller_and_the_engine_recovers(model):
    broken = copy.deepcopy(model)

    def device_lost(*args, **kwargs):
        raise RuntimeError("device lost")

    broken.forward = device_lost
    engine = make_engine(broken)
    with pytest.raises(RuntimeError, match="device lost"):
        generate(engine, PROMPTS[:2], [SamplingParams(seed=1), SamplingParams(seed=2)])
    del broken.forward  # the class's forward again
    out = generate(engine, [PROMPTS[0]], [SamplingParams(temperature=0, max_new_tokens=4)])[0]
    assert out.token_ids == alone(model, PROMPTS[0], SamplingParams(temperature=0, max_new_tokens=4)).token_ids


def test_close_fails_requests_still_waiting(model):
    engine = make_engine(model, max_batch_size=1)

    async def scenario():
        running = asyncio.ensure_future(engine.generate(PROMPTS[1], SamplingParams(max_new_tokens=120, seed=0)))
        queued = asyncio.ensure_future(engine.generate(PROMPTS[0], SamplingParams(max_new_tokens=4, seed=1)))
        while engine.batches_run == 0:
            await asyncio.sleep(0.0005)
        await engine.close()
        return await asyncio.gather(running, queued, return_exceptions=True)

    results = asyncio.run(scenario())
    assert all(isinstance(r, EngineClosedError) for r in results)


def test_unseeded_requests_repeat_under_the_engine_seed(model):
    free = [SamplingParams(max_new_tokens=8)] * 3
    first = generate(make_engine(model, seed=5), PROMPTS[:3], free)
    again = generate(make_engine(model, seed=5), PROMPTS[:3], free)
    other = generate(make_engine(model, seed=6), PROMPTS[:3], free)
    assert [o.token_ids for o in first] == [o.token_ids for o in again] != [o.token_ids for o in other]
    assert len({o.meta["seed"] for o in first}) == 3


def test_a_refused_weight_update_leaves_every_weight_and_the_version_as_they_were(model):
    # a strict load_state_dict copies every tensor that fits before it raises: one wrong shape used to leave new
    # weights serving under the old version
    engine = make_engine(copy.deepcopy(model))
    before = {k: v.clone() for k, v in engine.model.state_dict().items()}
    update = {k: v + 1.0 for k, v in before.items()}
    update["model.norm.weight"] = torch.ones(7)  # a foreign checkpoint's shape
    with pytest.raises(RuntimeError, match="nothing loaded"):
        engine.update_weights(update, version=5)
    assert engine.version == 0
    assert all(torch.equal(v, before[k]) for k, v in engine.model.state_dict().items())


def test_compiled_decoding_runs_a_model_whose_config_names_no_key_value_heads():
    # GPT-2, GPT-NeoX and OPT configs have no num_key_value_heads: every compiled batch raised AttributeError
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4)).eval()
    greedy = SamplingParams(temperature=0, max_new_tokens=6)
    prompts = [[5, 17, 33], [7, 8, 9, 10, 11]]
    dynamic = generate(make_engine(gpt2), prompts, [greedy] * 2)
    compiled = generate(make_engine(gpt2, compile="eager"), prompts, [greedy] * 2)
    assert [c.token_ids for c in compiled] == [c.token_ids for c in dynamic]
    assert len(compiled[0].token_ids) == 6
