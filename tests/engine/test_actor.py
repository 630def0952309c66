"""The actor: batch padding, response log-probs, gradient accumulation, update direction, faults."""

from __future__ import annotations

import copy

import pytest
import torch

from rlrm.config.schema import ActorConfig
from rlrm.engine.actor.actor import Actor
from rlrm.engine.actor.batch import collate
from rlrm.engine.actor.logprobs import response_log_probs
from rlrm.engine.rollout.base import Completion
from rlrm.errors import TrainingError


@pytest.fixture()
def model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
    )
    return Qwen2ForCausalLM(config).eval()


def completions():
    # unequal prompt and response lengths; two groups of two
    specs = [([5, 9, 12], [4, 8]), ([7, 3], [1, 2, 3, 4]), ([11, 12, 13, 14], [9]), ([2], [6, 6, 6])]
    return [Completion(p, r, [-1.0] * len(r), "length") for p, r in specs]


def batch_with(adv, model=None):
    batch = collate(completions(), pad_token_id=0)
    batch.advantages = torch.tensor(adv, dtype=torch.float32)
    if model is not None:
        batch.old_log_prob = response_log_probs(model, batch, 1.0, 64)[0].detach()
    return batch


def test_collate_pads_left_and_right():
    b = collate(completions(), pad_token_id=0)
    assert b.input_ids.shape == (4, 4 + 4)  # P = 4, R = 4
    assert b.input_ids[1].tolist() == [0, 0, 7, 3, 1, 2, 3, 4]
    assert b.attention_mask[0].tolist() == [0, 1, 1, 1, 1, 1, 0, 0]
    assert b.response_mask[2].tolist() == [1, 0, 0, 0]
    assert b.position_ids[0].tolist()[1:6] == [0, 1, 2, 3, 4]
    assert b.rollout_log_prob[0].tolist() == [-1.0, -1.0, 0.0, 0.0]
    assert len(b.select([0, 2])) == 2 and b.select([3]).input_ids[0].tolist() == b.input_ids[3].tolist()


def test_log_probs_match_unpadded_forward(model):
    b = collate(completions(), pad_token_id=0)
    with torch.no_grad():
        lp, ent = response_log_probs(model, b, temperature=0.8, micro_batch_size=3, with_entropy=True)
    for i, c in enumerate(completions()):
        ids = torch.tensor([c.prompt_ids + c.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(c.prompt_ids) - 1 : -1] / 0.8
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(lp[i, : len(c.token_ids)], expected, atol=1e-5)
    assert ent.shape == lp.shape and (ent[b.response_mask.bool()] > 0).all()


def _grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_micro_batches_accumulate_to_the_full_gradient(model, mode):
    grads = []
    for micro in (4, 1, 3):
        m = copy.deepcopy(model)
        cfg = ActorConfig(mini_batch_size=2, micro_batch_size=micro, loss_agg_mode=mode, lr=1e-3)
        actor = Actor(m, None, cfg, temperature=1.0, total_steps=1, n=2)
        batch = batch_with([1.0, -1.0, 0.5, -0.5], m)
        actor.optimizer.step = lambda: None  # keep the weights: compare gradients only
        actor._mini_batch_step(batch)
        grads.append(_grads(m))
    assert torch.allclose(grads[0], grads[1], atol=1e-6) and torch.allclose(grads[0], grads[2], atol=1e-6)


def test_update_moves_log_probs_with_the_advantage(model):
    actor = Actor(model, None, ActorConfig(lr=1e-2, mini_batch_size=2), temperature=1.0, total_steps=1, n=2)
    batch = batch_with([1.0, -1.0, 1.0, -1.0], model)
    before = batch.old_log_prob.clone()
    metrics = actor.update(batch)
    with torch.no_grad():
        after = response_log_probs(model, batch, 1.0, 64)[0]
    gain = ((after - before) * batch.response_mask).sum(-1)
    assert gain[0] > 0 and gain[2] > 0 and gain[1] < 0 and gain[3] < 0
    assert metrics["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-6)  # first mini-batch is on-policy
    assert metrics["actor/pg_clipfrac"] == 0.0
    assert metrics["actor/nonfinite_skipped"] == 0


def test_warmup_schedule(model):
    actor = Actor(model, None, ActorConfig(lr=1e-3, warmup_steps=4), temperature=1.0, total_steps=10, n=2)
    lrs = []
    for _ in range(6):
        lrs.append(actor.optimizer.param_groups[0]["lr"])
        actor.scheduler.step()
    assert lrs == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])


def test_kl_loss_is_zero_against_itself(model):
    cfg = ActorConfig(use_kl_loss=True, kl_loss_type="low_var_kl", mini_batch_size=2)
    actor = Actor(model, copy.deepcopy(model), cfg, temperature=1.0, total_steps=1, n=2)
    batch = batch_with([0.0, 0.0, 0.0, 0.0], model)
    batch.ref_log_prob = actor.compute_ref_log_prob(batch)
    metrics = actor.update(batch)
    assert metrics["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)


def test_nonfinite_loss_is_skipped_then_stops(model):
    actor = Actor(model, None, ActorConfig(mini_batch_size=2, max_nonfinite_steps=2), temperature=1.0, total_steps=1, n=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = batch_with([float("nan"), 1.0, -1.0, 0.0], model)
    metrics = actor.update(batch.select([0, 1]))  # one mini-batch, NaN: skipped
    assert metrics["actor/nonfinite_skipped"] == 1
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    good = actor.update(batch.select([2, 3]))  # a finite update resets the count
    assert good["actor/nonfinite_skipped"] == 0 and actor.nonfinite_in_row == 0
    actor.update(batch.select([0, 1]))
    with pytest.raises(TrainingError, match="2 non-finite losses in a row"):
        actor.update(batch.select([0, 1]))


def test_state_dict_round_trip(model):
    actor = Actor(model, None, ActorConfig(mini_batch_size=2, warmup_steps=3), temperature=1.0, total_steps=5, n=2)
    actor.update(batch_with([1.0, -1.0, 1.0, -1.0], model))
    state = copy.deepcopy(actor.state_dict())
    fresh = Actor(copy.deepcopy(model), None, ActorConfig(mini_batch_size=2, warmup_steps=3), 1.0, 5, 2)
    fresh.load_state_dict(state)
    assert fresh.optimizer.param_groups[0]["lr"] == actor.optimizer.param_groups[0]["lr"]
    a = actor.optimizer.state_dict()["state"][0]["exp_avg"]
    assert torch.equal(fresh.optimizer.state_dict()["state"][0]["exp_avg"], a)
