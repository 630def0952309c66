"""The hf rollout engine: log-probs, sampling controls, seeded batching, EOS, weight updates, errors."""

from __future__ import annotations

import asyncio

import pytest
import torch

from rlrm.engine.rollout.base import SamplingParams
from rlrm.engine.rollout.hf import HFRolloutEngine

VOCAB = 64


@pytest.fixture(scope="module")
def model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
    )
    return Qwen2ForCausalLM(config).eval()


def run(coro):
    return asyncio.run(coro)


def make_engine(model, eos=(63,), **kw):
    return HFRolloutEngine(model, eos_token_ids=list(eos), pad_token_id=0, **kw)


async def _generate(engine, prompts, samplings):
    try:
        return await engine.generate_many(prompts, samplings)
    finally:
        await engine.close()


PROMPTS = [[5, 9, 12], [7, 3, 3, 3, 8, 1], [11], [2, 4, 6, 8]]


def _model_log_probs(model, prompt, tokens, temperature):
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1] / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_probs_equal_the_models(model, temperature):
    sampling = [SamplingParams(temperature=temperature, max_new_tokens=12, seed=i) for i in range(len(PROMPTS))]
    outs = run(_generate(make_engine(model, eos=()), PROMPTS, sampling))
    for prompt, out in zip(PROMPTS, outs):
        assert len(out.token_ids) == 12 and out.finish_reason == "length"
        expected = _model_log_probs(model, prompt, out.token_ids, temperature)
        assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-4)


def test_greedy_matches_hf_generate(model):
    out = run(_generate(make_engine(model, eos=()), [PROMPTS[1]], [SamplingParams(temperature=0.0, max_new_tokens=10)]))[0]
    ref = model.generate(torch.tensor([PROMPTS[1]]), max_new_tokens=10, do_sample=False, min_new_tokens=10)
    assert out.token_ids == ref[0, len(PROMPTS[1]) :].tolist()
    for k_sampling in (SamplingParams(temperature=1.0, top_k=1, max_new_tokens=10, seed=3),
                       SamplingParams(temperature=1.0, top_p=1e-6, max_new_tokens=10, seed=4)):
        same = run(_generate(make_engine(model, eos=()), [PROMPTS[1]], [k_sampling]))[0]
        assert same.token_ids == out.token_ids  # top-k 1 and a tiny top-p are greedy


def test_seeded_request_is_independent_of_its_batch(model):
    target = SamplingParams(temperature=1.0, max_new_tokens=12, seed=1234)
    alone = run(_generate(make_engine(model, eos=()), [PROMPTS[0]], [target]))[0]
    crowd_prompts = [PROMPTS[i % 4] for i in range(16)]
    crowd_prompts[9] = PROMPTS[0]
    sampling = [SamplingParams(temperature=0.9, max_new_tokens=12, seed=i) for i in range(16)]
    sampling[9] = target
    engine = make_engine(model, eos=(), max_batch_size=16)
    crowd = run(_generate(engine, crowd_prompts, sampling))
    assert crowd[9].token_ids == alone.token_ids
    other_seed = run(_generate(make_engine(model, eos=()), [PROMPTS[0]], [SamplingParams(max_new_tokens=12, seed=99)]))[0]
    assert other_seed.token_ids != alone.token_ids


def test_requests_are_batched(model):
    engine = make_engine(model, eos=(), max_batch_size=8, batch_wait_ms=50)
    sampling = [SamplingParams(max_new_tokens=4, seed=i) for i in range(16)]
    run(_generate(engine, [PROMPTS[i % 4] for i in range(16)], sampling))
    assert engine.batches_run <= 3  # 16 requests, at most 8 per batch


def test_stops_on_eos_and_includes_it(model):
    # make the greedy continuation's 3rd token the EOS id
    greedy = run(_generate(make_engine(model, eos=()), [PROMPTS[2]], [SamplingParams(temperature=0, max_new_tokens=6)]))[0]
    eos = greedy.token_ids[2]
    out = run(_generate(make_engine(model, eos=(eos,)), [PROMPTS[2]], [SamplingParams(temperature=0, max_new_tokens=6)]))[0]
    first = greedy.token_ids.index(eos)
    assert out.token_ids == greedy.token_ids[: first + 1]
    assert out.finish_reason == "stop" and len(out.log_probs) == len(out.token_ids)


def test_mixed_lengths_in_one_batch(model):
    sampling = [SamplingParams(max_new_tokens=n, seed=n) for n in (2, 9, 5)]
    outs = run(_generate(make_engine(model, eos=()), PROMPTS[:3], sampling))
    assert [len(o.token_ids) for o in outs] == [2, 9, 5]


def test_update_weights_changes_outputs_and_version(model):
    import copy

    engine = make_engine(copy.deepcopy(model), eos=())
    greedy = SamplingParams(temperature=0, max_new_tokens=8)

    async def scenario():
        before = await engine.generate(PROMPTS[1], greedy)
        state = {k: v.clone() for k, v in engine.model.state_dict().items()}
        torch.manual_seed(1)
        state = {k: v + 0.5 * torch.randn_like(v) if v.is_floating_point() else v for k, v in state.items()}
        engine.update_weights(state, version=7)
        after = await engine.generate(PROMPTS[1], greedy)
        await engine.close()
        return before, after

    before, after = run(scenario())
    assert before.policy_version == 0 and after.policy_version == 7
    assert before.token_ids != after.token_ids


def test_bad_requests_fail_at_once(model):
    engine = make_engine(model)
    with pytest.raises(ValueError, match="empty prompt"):
        run(engine.generate([], SamplingParams()))
    with pytest.raises(ValueError, match="exceeds the model's 128 positions"):
        run(engine.generate([1] * 120, SamplingParams(max_new_tokens=20)))


def test_decode_errors_reach_every_caller(model):
    engine = make_engine(model)

    async def broken(batch):
        raise RuntimeError("device lost")

    engine._decode = broken
    with pytest.raises(RuntimeError, match="device lost"):
        run(_generate(engine, PROMPTS[:2], [SamplingParams(seed=1), SamplingParams(seed=2)]))


def test_weights_sent_mid_batch_apply_after_it(model):
    import copy

    engine = make_engine(copy.deepcopy(model), eos=())
    new_state = {k: v + 0.5 if v.is_floating_point() else v for k, v in engine.model.state_dict().items()}

    async def scenario():
        first = asyncio.ensure_future(engine.generate(PROMPTS[1], SamplingParams(temperature=0, max_new_tokens=30)))
        while not engine._decoding:  # wait until the batch is being decoded
            await asyncio.sleep(0.001)
        engine.update_weights(new_state, version=3)
        done = await first
        second = await engine.generate(PROMPTS[1], SamplingParams(temperature=0, max_new_tokens=30))
        await engine.close()
        return done, second

    done, second = run(scenario())
    alone = run(_generate(make_engine(model, eos=()), [PROMPTS[1]], [SamplingParams(temperature=0, max_new_tokens=30)]))[0]
    assert done.policy_version == 0 and done.token_ids == alone.token_ids  # untouched by the update
    assert second.policy_version == 3
