"""The actor: batch padding, response log-probs, gradient accumulation, update direction, KL/entropy, faults."""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch

from rlrm.config.schema import ActorConfig
from rlrm.engine.actor.actor import Actor
from rlrm.engine.actor.batch import collate
from rlrm.engine.actor.logprobs import response_log_probs
from rlrm.errors import TrainingError
from rlrm.inference.base import Completion
from rlrm.inference.kv_cache import distinct_rows

SPECS = [([5, 9, 12], [4, 8]), ([7, 3], [1, 2, 3, 4]), ([11, 12, 13, 14], [9]), ([2], [6, 6, 6])]


def completions():
    # unequal prompt and response lengths; two groups of two
    return [Completion(p, r, [-1.0] * len(r), "length", policy_version=i) for i, (p, r) in enumerate(SPECS)]


def batch_with(adv, model=None):
    batch = collate(completions(), pad_token_id=0)
    batch.advantages = torch.tensor(adv, dtype=torch.float32)
    if model is not None:
        with torch.no_grad():
            batch.old_log_prob = response_log_probs(model, batch, 1.0, 64)[0]
    return batch


def manual_logits(model, prompt, response, temperature=1.0):
    """Logits [r, V] predicting each response token, from one unpadded forward pass."""
    with torch.no_grad():
        return model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1] / temperature


def _grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def _no_step(actor):
    actor.optimizer.step = lambda: None  # keep the weights: compare gradients only
    return actor


# ---------------------------------------------------------------- collate


def test_collate_pads_left_and_right():
    b = collate(completions(), pad_token_id=0)
    assert b.input_ids.shape == (4, 4 + 4) and (b.prompt_length, b.response_length) == (4, 4)
    assert b.input_ids[1].tolist() == [0, 0, 7, 3, 1, 2, 3, 4]
    assert b.input_ids[3].tolist() == [0, 0, 0, 2, 6, 6, 6, 0]
    assert b.attention_mask[0].tolist() == [0, 1, 1, 1, 1, 1, 0, 0]
    assert b.position_ids[0].tolist() == [0, 0, 1, 2, 3, 4, 4, 4]  # pads clamp to 0 / repeat the last
    assert b.position_ids[3].tolist()[3:7] == [0, 1, 2, 3]
    assert b.response_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0]]
    assert b.rollout_log_prob[0].tolist() == [-1.0, -1.0, 0.0, 0.0]
    assert b.policy_version.tolist() == [0, 1, 2, 3]
    assert b.advantages is None and b.old_log_prob is None


def test_collate_masks_turn_ends_and_empty_responses():
    # row 0: an agent trajectory of 5 tokens (assistant 2, tool 2, assistant 1), its observation masked out;
    # row 1: no response at all; row 2: one plain response. P = 2, R = 5.
    agent = Completion(
        [3, 4], [10, 11, 90, 91, 12], [-0.25, -0.5, 0.0, 0.0, -0.125], "stop", loss_mask=[1, 1, 0, 0, 1],
        meta={"agent": {"turns": [{"role": "assistant", "tokens": 2}, {"role": "tool", "tokens": 2},
                                  {"role": "assistant", "tokens": 1}]}},
    )  # fmt: skip
    b = collate([agent, Completion([5], [], [], "length"), Completion([6, 7], [13, 14], [-2.0, -0.75], "stop")], 0)
    assert b.input_ids.tolist() == [[3, 4, 10, 11, 90, 91, 12], [0, 5, 0, 0, 0, 0, 0], [6, 7, 13, 14, 0, 0, 0]]
    assert b.attention_mask.tolist() == [[1] * 7, [0, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0]]
    assert b.response_mask.tolist() == [[1, 1, 0, 0, 1], [0] * 5, [1, 1, 0, 0, 0]]
    assert b.rollout_log_prob.tolist() == [[-0.25, -0.5, 0.0, 0.0, -0.125], [0.0] * 5, [-2.0, -0.75, 0.0, 0.0, 0.0]]
    # turn k's last generated token holds k + 1: positions 1 and 4 of the trajectory, 1 of the plain response
    assert b.turn_end.tolist() == [[0, 1, 0, 0, 2], [0] * 5, [0, 1, 0, 0, 0]]
    assert (b.input_ids.dtype, b.attention_mask.dtype, b.turn_end.dtype) == (torch.long,) * 3
    assert (b.response_mask.dtype, b.rollout_log_prob.dtype) == (torch.float32,) * 2


def test_select_takes_rows_of_every_tensor():
    b = collate(completions(), pad_token_id=0)
    b.advantages = torch.tensor([1.0, 2.0, 3.0, 4.0])
    b.group_ids = torch.tensor([0, 0, 1, 1])
    sub = b.select(torch.tensor([3, 0]))
    assert len(sub) == 2 and sub.input_ids[0].tolist() == b.input_ids[3].tolist()
    assert sub.advantages.tolist() == [4.0, 1.0] and sub.group_ids.tolist() == [1, 0]
    assert sub.old_log_prob is None and b.select([1]).response_mask.tolist() == [[1, 1, 1, 1]]


def test_collate_rejects_bad_completions():
    with pytest.raises(ValueError, match="at least one"):
        collate([], 0)
    with pytest.raises(ValueError, match="empty prompt"):
        collate([Completion([], [1], [-0.5], "stop")], 0)
    with pytest.raises(ValueError, match="1 log-probs for 2 response tokens"):
        collate([Completion([1], [2, 3], [-0.5], "stop")], 0)


# ---------------------------------------------------------------- log-probs


@pytest.mark.parametrize("micro", [1, 3, 64])
def test_log_probs_match_unpadded_forward(model, micro):
    # Any position-id or padding mistake shifts the logits and breaks this equality.
    b = collate(completions(), pad_token_id=0)
    with torch.no_grad():
        lp, ent = response_log_probs(model, b, temperature=1.0, micro_batch_size=micro, with_entropy=True)
    for i, (prompt, response) in enumerate(SPECS):
        logits = manual_logits(model, prompt, response)
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(response)[:, None]).squeeze(-1)
        assert torch.allclose(lp[i, : len(response)], expected, atol=1e-5)
        probs = torch.softmax(logits, -1)
        assert torch.allclose(ent[i, : len(response)], -(probs * probs.log()).sum(-1), atol=1e-5)


# Two GRPO groups and a lone prompt: rows that share a prompt run it once (rlrm/inference/kv_cache.py).
SHARED = [
    ([5, 9, 12], [4, 8]),
    ([5, 9, 12], [4, 1, 7]),
    ([7, 3], [1]),
    ([7, 3], [2, 3, 4, 5]),
    ([7, 3], [1, 9]),
    ([11, 12, 13, 14], [9]),
]


def _shared_batch(specs):
    return collate([Completion(p, r, [-1.0] * len(r), "length") for p, r in specs], pad_token_id=0)


@pytest.mark.parametrize("specs", [SHARED, [(p, r[:1]) for p, r in SHARED]], ids=["responses", "one-token"])
def test_log_probs_of_rows_sharing_a_prompt_match_unpadded_forward(model, specs):
    b = _shared_batch(specs)
    with torch.no_grad():
        lp, ent = response_log_probs(model, b, temperature=1.0, micro_batch_size=64, with_entropy=True)
    for i, (prompt, response) in enumerate(specs):
        logits = manual_logits(model, prompt, response)
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(response)[:, None]).squeeze(-1)
        assert torch.allclose(lp[i, : len(response)], expected, atol=1e-5)
        probs = torch.softmax(logits, -1)
        assert torch.allclose(ent[i, : len(response)], -(probs * probs.log()).sum(-1), atol=1e-5)


def test_rows_sharing_a_prompt_give_the_gradient_of_separate_rows(model):
    # micro-batches of one row never share a prompt: the plain forward, row by row
    b = _shared_batch(SHARED)
    grads = []
    for micro in (64, 1):
        model.zero_grad(set_to_none=True)
        lp, _ = response_log_probs(model, b, 1.0, micro)
        (lp * b.response_mask * torch.arange(1.0, 7.0)[:, None]).sum().backward()
        grads.append(_grads(model))
    assert torch.allclose(grads[0], grads[1], atol=1e-6) and grads[0].abs().max() > 1e-3


def test_distinct_rows_tell_pads_from_tokens_of_the_same_id():
    ids = torch.tensor([[0, 5, 6], [0, 5, 6], [4, 5, 6], [0, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1]])  # row 3: token 0 is real, not a pad
    index, inverse = distinct_rows(ids, mask)
    assert inverse.tolist()[:2] == [inverse[0].item()] * 2 and len(set(inverse.tolist())) == 3
    assert sorted(index.tolist()) == [0, 2, 3] and (inverse[index] == torch.arange(3)).all()


def test_temperature_divides_the_logits(model):
    b = collate(completions(), pad_token_id=0)
    with torch.no_grad():
        lp_hot = response_log_probs(model, b, temperature=2.0, micro_batch_size=4)[0]
        lp_one = response_log_probs(model, b, temperature=1.0, micro_batch_size=4)[0]
        lp_greedy = response_log_probs(model, b, temperature=0.0, micro_batch_size=4)[0]
    prompt, response = SPECS[1]
    logits = manual_logits(model, prompt, response, temperature=2.0)
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(response)[:, None]).squeeze(-1)
    assert torch.allclose(lp_hot[1], expected, atol=1e-5)
    assert not torch.allclose(lp_hot[1], lp_one[1], atol=1e-3)
    assert torch.equal(lp_greedy, lp_one)  # temperature 0 (greedy) scores at temperature 1


def test_log_probs_carry_gradients_and_detached_entropy_does_not(model):
    b = collate(completions(), pad_token_id=0)
    lp, ent = response_log_probs(model, b, 1.0, 2, with_entropy=True, entropy_grad=False)
    assert lp.requires_grad and not ent.requires_grad
    _, ent_grad = response_log_probs(model, b, 1.0, 2, with_entropy=True)
    assert ent_grad.requires_grad and torch.allclose(ent, ent_grad.detach())


@pytest.mark.parametrize("chunk", [1, 3, 7])
@pytest.mark.parametrize("specs", [SPECS, SHARED], ids=["distinct", "shared-prompts"])
def test_the_lm_head_in_chunks_gives_the_same_log_probs_entropy_and_gradient(model, specs, chunk):
    # chunks smaller than a row, across rows and uneven at the end; with and without shared prompts
    b = _shared_batch(specs)
    weight = torch.arange(1.0, len(specs) + 1)[:, None] * b.response_mask
    results = []
    for tokens in (0, chunk):
        model.zero_grad(set_to_none=True)
        lp, ent = response_log_probs(model, b, 0.7, 64, with_entropy=True, chunk_tokens=tokens, chunk_above_bytes=0)
        ((lp + 0.1 * ent) * weight).sum().backward()
        results.append((lp.detach(), ent.detach(), _grads(model)))
    (lp0, ent0, grad0), (lp1, ent1, grad1) = results
    assert torch.allclose(lp1, lp0, atol=1e-5) and torch.allclose(ent1, ent0, atol=1e-5)
    assert torch.allclose(grad1, grad0, atol=1e-5) and grad0.abs().max() > 1e-3
    assert model.lm_head.weight.grad is not None or model.config.tie_word_embeddings


VOCAB = 97  # a width no other tensor of the model below has: only logits (and what is made of them) end in it


def _qwen2_of_vocab(hidden: int, tie: bool = False):
    """A random one-layer Qwen2 (seed 0) of VOCAB tokens, MLP 2x `hidden`."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=tie,
    )
    return Qwen2ForCausalLM(config).eval()


@pytest.fixture(scope="module")
def model97():
    return _qwen2_of_vocab(hidden=32)


def _kept_logits(model, batch, **chunking) -> int:
    """The largest [..., V] activation autograd keeps for the backward pass of the batch's log-probs."""
    weights = {p.data_ptr() for p in model.parameters()}
    sizes = [0]

    def pack(t):
        activation = t.dim() > 1 and t.shape[-1] == VOCAB and t.data_ptr() not in weights
        sizes.append(t.numel() if activation else 0)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        response_log_probs(model, batch, 1.0, 64, **chunking)
    return max(sizes)


def test_chunks_keep_no_logits_for_the_backward_pass(model97):
    b = _shared_batch(SHARED)
    assert _kept_logits(model97, b) >= len(SHARED) * b.response_length * VOCAB  # whole: [b, R, V] kept
    assert _kept_logits(model97, b, chunk_tokens=4, chunk_above_bytes=0) == 0  # made again in the backward pass


def test_small_logits_run_whole_whatever_the_chunk(model97):
    b = _shared_batch(SHARED)
    logit_bytes = len(SHARED) * b.response_length * VOCAB * 4
    assert _kept_logits(model97, b, chunk_tokens=4, chunk_above_bytes=logit_bytes) > 0
    assert _kept_logits(model97, b, chunk_tokens=4, chunk_above_bytes=logit_bytes - 1) == 0


def test_under_bf16_autocast_chunks_add_up_the_head_gradient_as_the_whole_head_does():
    # a tied head (the embedding is the head): each chunk's bf16 copy of the weight is its own, so the gradient
    # adds up over the chunks in float32, as the whole head's one product does. With autocast's cached copy it
    # added up in bf16: 2.9x the whole head's error here (0.0098 against 0.0034)
    model = _qwen2_of_vocab(hidden=64, tie=True)
    draw = torch.Generator().manual_seed(1)
    responses = [torch.randint(1, VOCAB, (64,), generator=draw).tolist() for _ in range(8)]
    b = collate([Completion([5, 9, 12], r, [-1.0] * 64, "length") for r in responses], pad_token_id=0)

    def gradient(autocast: bool, chunk: int) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            lp, _ = response_log_probs(model, b, 1.0, 64, chunk_tokens=chunk, chunk_above_bytes=0)
        (lp * b.response_mask).sum().backward()
        return model.lm_head.weight.grad.clone()

    exact = gradient(False, 0)
    whole, chunked = gradient(True, 0), gradient(True, 4)  # 128 chunks of 4 positions
    error = {name: ((g - exact).norm() / exact.norm()).item() for name, g in (("whole", whole), ("chunked", chunked))}
    assert error["chunked"] <= 1.5 * error["whole"], error


def test_a_bf16_head_adds_up_its_chunks_gradient_in_float32():
    # pure bf16 weights (and FSDP2's gathered head under mixed precision): the chunks cast one float32 copy of the
    # head, so its gradient is rounded to bf16 once, as the whole head's one product is. Adding up bf16 gradients
    # chunk by chunk (the weight used as it is): 1.9x the whole head's error here (0.0107 against 0.0056; with the
    # float32 copy 0.0055)
    exact_model = _qwen2_of_vocab(hidden=64, tie=True)
    model = copy.deepcopy(exact_model).to(torch.bfloat16)
    draw = torch.Generator().manual_seed(1)
    responses = [torch.randint(1, VOCAB, (64,), generator=draw).tolist() for _ in range(8)]
    b = collate([Completion([5, 9, 12], r, [-1.0] * 64, "length") for r in responses], pad_token_id=0)

    def gradient(m, chunk: int) -> torch.Tensor:
        m.zero_grad(set_to_none=True)
        lp, _ = response_log_probs(m, b, 1.0, 64, chunk_tokens=chunk, chunk_above_bytes=0)
        (lp * b.response_mask).sum().backward()
        return m.lm_head.weight.grad.float().clone()

    exact = gradient(exact_model, 0)
    whole, chunked = gradient(model, 0), gradient(model, 4)  # 128 chunks of 4 positions
    error = {name: ((g - exact).norm() / exact.norm()).item() for name, g in (("whole", whole), ("chunked", chunked))}
    assert error["chunked"] <= 1.2 * error["whole"], error


def test_chunks_with_a_detached_entropy_keep_the_log_prob_gradient_only(model):
    b = _shared_batch(SHARED)
    lp, ent = response_log_probs(
        model, b, 1.0, 64, with_entropy=True, entropy_grad=False, chunk_tokens=5, chunk_above_bytes=0
    )
    assert lp.requires_grad and not ent.requires_grad
    with torch.no_grad():
        want = response_log_probs(model, b, 1.0, 64, with_entropy=True)
    assert torch.allclose(lp.detach(), want[0], atol=1e-5) and torch.allclose(ent, want[1], atol=1e-5)


def test_under_no_grad_chunks_compute_without_checkpoints(model):
    b = _shared_batch(SHARED)
    with torch.no_grad():
        whole = response_log_probs(model, b, 1.0, 64, with_entropy=True)
        chunked = response_log_probs(model, b, 1.0, 64, with_entropy=True, chunk_tokens=5, chunk_above_bytes=0)
    assert torch.allclose(whole[0], chunked[0], atol=1e-5) and torch.allclose(whole[1], chunked[1], atol=1e-5)
    assert not chunked[0].requires_grad


def test_models_whose_logits_are_more_than_the_head_are_not_chunked(model):
    from rlrm.engine.actor.logprobs import _plain_head

    assert _plain_head(model) is not None
    other = copy.deepcopy(model)
    other.config.model_type = "gemma2"  # final logit soft-capping: logits are not the head's output alone
    assert _plain_head(other) is None


# ---------------------------------------------------------------- gradient accumulation


@pytest.mark.parametrize(
    "mode, extra",
    [
        ("token-mean", {}),
        ("token-mean", {"use_kl_loss": True, "kl_loss_type": "k1", "kl_loss_coef": 0.5, "entropy_coeff": 0.1}),
        ("seq-mean-token-mean", {}),
        ("seq-mean-token-sum", {}),
        ("seq-mean-token-sum-norm", {}),
    ],
)
def test_micro_batches_accumulate_to_the_full_gradient(model, mode, extra):
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))  # a reference that differs, so the KL term has a gradient
    grads, metrics = [], []
    for micro in (4, 1, 3):  # one pass, per sample, and an uneven split (3 + 1)
        m = copy.deepcopy(model)
        cfg = ActorConfig(mini_batch_size=2, micro_batch_size=micro, loss_agg_mode=mode, lr=1e-3, **extra)
        actor = _no_step(Actor(m, ref, cfg, temperature=1.0, total_steps=1, n=2))
        batch = batch_with([1.0, -1.0, 0.5, -0.5], m)
        batch.old_log_prob = batch.old_log_prob + 0.1 * torch.arange(4.0)[:, None]  # off-policy: ratio != 1
        if cfg.use_kl_loss:
            batch.ref_log_prob = actor.compute_ref_log_prob(batch)
        metrics.append(actor._mini_batch_step(batch))
        grads.append(_grads(m))
    for g, row in zip(grads[1:], metrics[1:]):
        assert torch.allclose(grads[0], g, atol=1e-6)
        for key in ("pg_loss", "entropy", "ppo_kl", "pg_clipfrac", "grad_norm") + (("kl_loss",) if extra else ()):
            assert row[key] == pytest.approx(metrics[0][key], abs=1e-5), key


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum-norm"])
def test_a_mini_batchs_gradient_ignores_how_long_another_groups_responses_are(model, mode):
    """Dr.GRPO's seq-mean-token-sum-norm divides by a constant (the run's response budget, as verl pads to it),
    not by the step's longest response: it once divided by the batch's padded width, so group A's gradient
    shrank 13x when group B, in another mini-batch, wrote 40 tokens instead of 2."""

    def group_a_gradient(other_len: int):
        m = copy.deepcopy(model)
        cfg = ActorConfig(mini_batch_size=1, micro_batch_size=4, loss_agg_mode=mode, lr=1e-3, grad_clip=1e9)
        actor = _no_step(Actor(m, None, cfg, temperature=1.0, total_steps=1, n=2, response_budget=48))
        specs = [([5, 9], [4, 8, 3]), ([5, 9], [7, 1]), ([3, 4], [2] * other_len), ([3, 4], [6] * other_len)]
        batch = collate([Completion(p, r, [-1.0] * len(r), "length") for p, r in specs], 0)
        batch.group_ids = torch.tensor([0, 0, 1, 1])
        batch.advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
        batch.old_log_prob = actor.compute_old_log_prob(batch) + 0.05
        actor._mini_batch_step(batch.select(actor.mini_batch_indices(batch)[0]))  # group A's rows only
        return _grads(m)

    assert torch.allclose(group_a_gradient(2), group_a_gradient(40), atol=1e-7)


def test_the_actor_step_with_logits_in_chunks_gives_the_whole_heads_gradient(model, monkeypatch):
    from rlrm.engine.actor import logprobs

    monkeypatch.setattr(logprobs, "WHOLE_BELOW_BYTES", 0)  # chunk even these tiny logits
    calls = []
    chunked = logprobs._chunked_head
    monkeypatch.setattr(logprobs, "_chunked_head", lambda *a: calls.append(a[-1]) or chunked(*a))
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    extra = {"use_kl_loss": True, "kl_loss_type": "k1", "kl_loss_coef": 0.5, "entropy_coeff": 0.1}
    grads, metrics = [], []
    for chunk in (0, 3):
        m = copy.deepcopy(model)
        cfg = ActorConfig(mini_batch_size=2, micro_batch_size=4, lr=1e-3, logits_chunk_tokens=chunk, **extra)
        actor = _no_step(Actor(m, ref, cfg, temperature=0.8, total_steps=1, n=2))
        batch = batch_with([1.0, -1.0, 0.5, -0.5], m)
        batch.old_log_prob = actor.compute_old_log_prob(batch) + 0.1 * torch.arange(4.0)[:, None]
        batch.ref_log_prob = actor.compute_ref_log_prob(batch)
        metrics.append(actor._mini_batch_step(batch))
        grads.append(_grads(m))
    assert calls and set(calls) == {3}  # old, reference and new log-probs, all in chunks of 3 positions
    assert len(calls) == 3
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
    for key in ("pg_loss", "entropy", "ppo_kl", "kl_loss", "grad_norm"):
        assert metrics[1][key] == pytest.approx(metrics[0][key], abs=1e-5), key


def test_a_ranks_old_and_reference_log_probs_take_the_head_in_chunks_too(model, monkeypatch):
    """The no-grad pass on FSDP2 ranks built the whole [b, R, V] logits (~40 GB at Qwen's vocabulary, 64 x 1,024)."""
    import types

    from rlrm.engine.actor import logprobs
    from rlrm.engine.actor.rank import RankWorker

    monkeypatch.setattr(logprobs, "WHOLE_BELOW_BYTES", 0)
    calls = []
    chunked = logprobs._chunked_head
    monkeypatch.setattr(logprobs, "_chunked_head", lambda *a: calls.append(a[-1]) or chunked(*a))
    cfg = ActorConfig(mini_batch_size=2, micro_batch_size=4, logits_chunk_tokens=3)
    actor = Actor(model, None, cfg, temperature=0.8, total_steps=1, n=2)
    worker = RankWorker.__new__(RankWorker)
    worker._actor = types.SimpleNamespace(model=model, ref_model=model, temperature=0.8, cfg=cfg)
    worker.device = torch.device("cpu")
    batch = batch_with([1.0, -1.0, 0.5, -0.5], model)
    for which in ("policy", "reference"):
        calls.clear()
        assert torch.allclose(worker.log_probs(which, batch), actor.compute_old_log_prob(batch), atol=1e-6)
        assert set(calls) == {3}


def _fp16_actor(model, **cfg):
    actor = Actor(
        model,
        None,
        ActorConfig(mini_batch_size=2, micro_batch_size=4, lr=1e-3, **cfg),
        temperature=1.0,
        total_steps=1,
        n=2,
        compute_dtype=torch.float16,
    )
    return actor


def test_a_float16_loss_scale_keeps_gradients_that_float16_would_lose(model):
    # advantages of 1e-7: float16's smallest subnormal is 6e-8, so the backward pass underflows unscaled
    tiny = [1e-7, -1e-7, 5e-8, -5e-8]
    grads = {}
    for name, scaled in (("float32", None), ("scaled", True), ("unscaled", False)):
        m = copy.deepcopy(model)
        actor = _no_step(
            Actor(m, None, ActorConfig(mini_batch_size=2, micro_batch_size=4), 1.0, 1, 2)
            if scaled is None
            else _fp16_actor(m)
        )
        if scaled is False:
            actor.loss_scale = None
        batch = batch_with(tiny, m)
        batch.old_log_prob = batch.old_log_prob + 0.1 * torch.arange(4.0)[:, None]
        actor._mini_batch_step(batch)
        grads[name] = _grads(m)
    exact = grads["float32"]
    error = {k: ((g - exact).norm() / exact.norm()).item() for k, g in grads.items() if k != "float32"}
    assert error["scaled"] < 0.05 and error["unscaled"] > 0.5, error


def test_an_overflowing_loss_scale_halves_and_skips_without_counting_a_failure(model):
    m = copy.deepcopy(model)
    actor = _fp16_actor(m, max_nonfinite_steps=1)
    actor.loss_scale = 2.0**40  # the scaled gradient cannot fit float16
    before = [p.detach().clone() for p in m.parameters()]
    stats = actor._mini_batch_step(batch_with([1.0, -1.0, 0.5, -0.5], m))
    assert stats["skipped"] == 1.0 and stats["loss_scale"] == 2.0**40
    assert actor.loss_scale == 2.0**39 and actor.nonfinite_in_row == 0  # max_nonfinite_steps=1 would have stopped
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters()))  # nothing reached the weights
    actor.loss_scale = 2.0**10
    stats = actor._mini_batch_step(batch_with([1.0, -1.0, 0.5, -0.5], m))
    assert stats["skipped"] == 0.0 and math.isfinite(stats["grad_norm"])


def test_the_loss_scale_halves_below_one_for_advantages_float16_cannot_hold_at_one(model):
    # Dr.GRPO advantages of rewards of 1e6: the backward overflows float16 at scale 1 and trains at 2^-4 (as
    # GradScaler finds); the halving stopped at 1, and 3 overflows later the run ended with a TrainingError
    m = copy.deepcopy(model)
    actor = _no_step(_fp16_actor(m, max_nonfinite_steps=3))
    actor.loss_scale = 1.0
    scales = []
    for _ in range(12):
        stats = actor._mini_batch_step(batch_with([1e6, -1e6, 5e5, -5e5], m))
        scales.append(stats["loss_scale"])
        if stats["skipped"] == 0.0:
            break
    assert stats["skipped"] == 0.0 and math.isfinite(stats["grad_norm"]) and scales[-1] < 1.0, scales
    assert actor.nonfinite_in_row == 0


def test_nan_advantages_under_float16_are_not_blamed_on_float16(model):
    # a NaN loss at scale 65,536 is the rewards' (critic/score), not float16's range: the bfloat16 advice is for an
    # overflow at the scale's floor only
    actor = _no_step(_fp16_actor(copy.deepcopy(model), max_nonfinite_steps=1))
    with pytest.raises(TrainingError) as caught:
        actor._mini_batch_step(batch_with([math.nan, 1.0, -1.0, 0.5], model))
    assert "check the rewards" in str(caught.value) and "bfloat16" not in str(caught.value)


def test_the_loss_scale_grows_after_clean_steps_and_is_checkpointed(model, monkeypatch):
    from rlrm.engine.actor import actor as actor_module

    monkeypatch.setattr(actor_module, "LOSS_SCALE_GROWTH_STEPS", 2)
    m = copy.deepcopy(model)
    actor = _fp16_actor(m)
    assert actor.loss_scale == actor_module.LOSS_SCALE_START
    for _ in range(2):
        actor._mini_batch_step(batch_with([1.0, -1.0, 0.5, -0.5], m))
    assert actor.loss_scale == 2 * actor_module.LOSS_SCALE_START and actor.clean_steps == 0
    actor._mini_batch_step(batch_with([1.0, -1.0, 0.5, -0.5], m))
    resumed = _fp16_actor(copy.deepcopy(m))
    resumed.load_state_dict(actor.state_dict())
    assert (resumed.loss_scale, resumed.clean_steps) == (actor.loss_scale, 1)


# ---------------------------------------------------------------- update


def test_update_moves_log_probs_with_the_advantage(model):
    actor = Actor(model, None, ActorConfig(lr=1e-2, mini_batch_size=2), temperature=1.0, total_steps=1, n=2)
    batch = batch_with([1.0, -1.0, 1.0, -1.0], model)
    before = batch.old_log_prob.clone()
    metrics = actor.update(batch)
    with torch.no_grad():
        after = response_log_probs(model, batch, 1.0, 64)[0]
    gain = ((after - before) * batch.response_mask).sum(-1)
    assert gain[0] > 0 and gain[2] > 0 and gain[1] < 0 and gain[3] < 0
    assert metrics["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-6)  # the only mini-batch is on-policy
    assert metrics["actor/pg_clipfrac"] == 0.0
    # on-policy, ratio 1: the token-mean loss is -mean(A) over tokens = -(2 - 4 + 1 - 3) / 10
    assert metrics["actor/pg_loss"] == pytest.approx(0.4, abs=1e-5)
    assert metrics["actor/nonfinite_skipped"] == 0 and metrics["actor/grad_norm"] > 0
    assert "actor/kl_loss" not in metrics and not model.training


def test_epochs_and_mini_batches_count_optimizer_steps(model):
    cfg = ActorConfig(mini_batch_size=1, micro_batch_size=1, ppo_epochs=3)
    actor = Actor(model, None, cfg, temperature=1.0, total_steps=1, n=2)
    batch = batch_with([1.0, -1.0, 1.0, -1.0], model)
    metrics = actor.update(batch)
    assert actor.optimizer.state_dict()["state"][0]["step"].item() == 3 * 2  # 3 epochs x 2 mini-batches
    assert metrics["actor/ppo_kl"] != 0.0  # later mini-batches are off-policy
    assert actor.scheduler.last_epoch == 1  # one scheduler step per update call


def test_mini_batches_keep_groups_whole(model):
    actor = Actor(model, None, ActorConfig(mini_batch_size=2), temperature=1.0, total_steps=1, n=2)
    batch = collate(completions() + completions()[:2], pad_token_id=0)
    batch.group_ids = torch.tensor([5, 7, 5, 9, 7, 9])  # interleaved groups
    assert [r.tolist() for r in actor.mini_batch_indices(batch)] == [[0, 2, 1, 4], [3, 5]]
    batch.group_ids = None  # no groups: runs of mini_batch_size * n samples
    assert [r.tolist() for r in actor.mini_batch_indices(batch)] == [[0, 1, 2, 3], [4, 5]]


def test_missing_old_log_prob_uses_the_rollout_log_probs(model):
    weights = []
    for use_rollout in (True, False):
        m = copy.deepcopy(model)
        actor = Actor(m, None, ActorConfig(lr=1e-2, mini_batch_size=2), temperature=1.0, total_steps=1, n=2)
        batch = batch_with([1.0, -1.0, 1.0, -1.0])
        batch.old_log_prob = None if use_rollout else batch.rollout_log_prob.clone()
        actor.update(batch)
        weights.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    assert torch.equal(weights[0], weights[1])


def test_update_needs_advantages_and_ref_log_probs(model):
    actor = Actor(model, None, ActorConfig(use_kl_loss=True), temperature=1.0, total_steps=1, n=2)
    with pytest.raises(ValueError, match="no advantages"):
        actor.update(collate(completions(), 0))
    with pytest.raises(ValueError, match="no ref_log_prob"):
        actor.update(batch_with([1.0, -1.0, 1.0, -1.0], model))
    with pytest.raises(ValueError, match="no reference model"):
        actor.compute_ref_log_prob(collate(completions(), 0))


def test_warmup_schedule(model):
    actor = Actor(model, None, ActorConfig(lr=1e-3, warmup_steps=4, mini_batch_size=2), 1.0, total_steps=10, n=2)
    batch = batch_with([1.0, -1.0, 1.0, -1.0], model)
    lrs = [actor.update(batch)["actor/lr"] for _ in range(6)]
    assert lrs == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])  # (k + 1) / 4 of lr, then lr
    no_warmup = Actor(copy.deepcopy(model), None, ActorConfig(lr=1e-3, mini_batch_size=2), 1.0, 10, 2)
    assert no_warmup.update(batch)["actor/lr"] == pytest.approx(1e-3)


# ---------------------------------------------------------------- KL and entropy


def test_kl_loss_against_itself_is_zero_with_zero_gradient(model):
    # k3(x) = e^-x + x - 1 with x = log pi - log ref: value 0 and slope 0 at x = 0.
    cfg = ActorConfig(use_kl_loss=True, kl_loss_type="k3", kl_loss_coef=1.0, mini_batch_size=2)
    actor = _no_step(Actor(model, copy.deepcopy(model), cfg, temperature=1.0, total_steps=1, n=2))
    batch = batch_with([0.0, 0.0, 0.0, 0.0], model)  # zero advantages: only the KL term could pull
    batch.ref_log_prob = actor.compute_ref_log_prob(batch)
    stats = actor._mini_batch_step(batch)
    assert stats["kl_loss"] == pytest.approx(0.0, abs=1e-7)
    assert _grads(model).abs().max() < 1e-7


def test_kl_loss_pulls_toward_the_reference(model):
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.1 * torch.randn_like(p))
    cfg = ActorConfig(use_kl_loss=True, kl_loss_type="low_var_kl", kl_loss_coef=1.0, lr=1e-3, mini_batch_size=2)
    actor = Actor(model, ref, cfg, temperature=1.0, total_steps=1, n=2)
    batch = batch_with([0.0, 0.0, 0.0, 0.0], model)  # zero advantages: only the KL term pulls
    batch.ref_log_prob = actor.compute_ref_log_prob(batch)
    kls = []
    for _ in range(4):
        batch.old_log_prob = actor.compute_old_log_prob(batch)
        kls.append(actor.update(batch)["actor/kl_loss"])  # measured before each step
    assert kls[0] > 1e-2 and all(b < a for a, b in itertools.pairwise(kls))


def test_entropy_bonus_raises_the_entropy(model):
    cfg = ActorConfig(entropy_coeff=1.0, lr=1e-2, mini_batch_size=2)
    actor = Actor(model, None, cfg, temperature=1.0, total_steps=1, n=2)
    batch = batch_with([0.0, 0.0, 0.0, 0.0], model)
    entropies = [actor.update(batch)["actor/entropy"] for _ in range(3)]
    assert entropies[2] > entropies[0]


# ---------------------------------------------------------------- faults and state


def test_nonfinite_loss_is_skipped_then_stops(model):
    actor = Actor(model, None, ActorConfig(mini_batch_size=2, max_nonfinite_steps=2), 1.0, total_steps=1, n=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = batch_with([float("nan"), 1.0, -1.0, 0.0], model)
    metrics = actor.update(batch.select([0, 1]))  # one mini-batch, NaN advantage: skipped
    assert metrics["actor/nonfinite_skipped"] == 1 and actor.nonfinite_in_row == 1
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not actor.optimizer.state  # the skipped step left no Adam moments behind
    good = actor.update(batch.select([2, 3]))  # a finite update resets the count
    assert good["actor/nonfinite_skipped"] == 0 and actor.nonfinite_in_row == 0
    actor.update(batch.select([0, 1]))
    with pytest.raises(TrainingError, match="2 non-finite losses in a row.*lower actor.lr"):
        actor.update(batch.select([0, 1]))


def test_policy_state_dict_is_detached_weights(model):
    actor = Actor(model, None, ActorConfig(), temperature=1.0, total_steps=1, n=2)
    state = actor.policy_state_dict()
    assert state.keys() == model.state_dict().keys()
    assert all(not v.requires_grad for v in state.values())
    name, param = next(iter(model.named_parameters()))
    assert torch.equal(state[name], param.detach())


def test_state_dict_round_trip_continues_identically(model):
    cfg = ActorConfig(mini_batch_size=2, warmup_steps=3, lr=1e-2)
    actor = Actor(model, None, cfg, temperature=1.0, total_steps=5, n=2)
    batch = batch_with([1.0, -1.0, 1.0, -1.0], model)
    actor.update(batch)
    actor.nonfinite_in_row = 1
    fresh_model = copy.deepcopy(model)
    fresh = Actor(fresh_model, None, cfg, 1.0, 5, 2)
    fresh.load_state_dict(copy.deepcopy(actor.state_dict()))
    assert fresh.optimizer.param_groups[0]["lr"] == actor.optimizer.param_groups[0]["lr"]
    assert fresh.nonfinite_in_row == 1
    a, b = actor.update(batch), fresh.update(batch)
    assert a["actor/lr"] == b["actor/lr"] == pytest.approx(2 / 3 * 1e-2)
    for p, q in zip(model.parameters(), fresh_model.parameters()):
        assert torch.equal(p, q)


def test_an_autocast_actor_computes_in_a_precision_no_engine_matches(model):
    """model.precision mixed in the trainer process: float32 parameters, forward and backward under bf16 autocast. Its
    log-probs are neither a bfloat16 copy's (the in-process engine's) nor a float32 server's, so `auto` recomputes
    the old log-probs against either; without autocast, a float32 engine's log-probs are the actor's own."""
    from rlrm.engine.behaviour import needs_recompute

    cfg = ActorConfig(mini_batch_size=2, micro_batch_size=4)
    mixed = Actor(model, None, cfg, 1.0, 1, 2, compute_dtype=torch.bfloat16)
    plain = Actor(model, None, cfg, 1.0, 1, 2)
    assert mixed.dtype == "bfloat16-autocast" and plain.dtype == torch.float32

    def recompute(engine, actor):
        return needs_recompute("auto", off_policy=False, ppo_epochs=1, engine_dtype=engine, actor_dtype=actor.dtype)

    assert recompute("bfloat16", mixed) and recompute("float32", mixed) and recompute(torch.bfloat16, mixed)
    assert not recompute("float32", plain) and recompute("bfloat16", plain)
    batch = batch_with([1.0, -1.0, 0.5, -0.5], model)  # the actor's float32 log-probs: old_log_prob
    with torch.no_grad(), mixed.autocast():  # and the numbers say why: autocast is not float32
        autocast_lp = response_log_probs(model, batch, 1.0, 64)[0]
    assert (autocast_lp.float() - batch.old_log_prob).abs().max() > 1e-4
