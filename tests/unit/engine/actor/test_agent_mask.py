"""Observation tokens reach the actor attended to but never trained on: no gradient, no say in the loss or its counts."""

from __future__ import annotations

import pytest
import torch

import rlrm.engine.actor.actor as actor_module
from rlrm.config.schema import ActorConfig
from rlrm.engine.actor.actor import Actor, MiniBatchSizes
from rlrm.engine.actor.batch import collate
from rlrm.engine.actor.logprobs import response_log_probs
from rlrm.inference.base import Completion

# two trajectories: generated, observation (mask 0), generated; and one plain single-turn completion
ROWS = [
    ([5, 9, 12], [4, 8, 30, 31, 32, 6, 7], [1, 1, 0, 0, 0, 1, 1]),
    ([7, 3], [1, 2, 40, 41, 3], [1, 1, 0, 0, 1]),
    ([11, 12], [9, 10, 11], None),
]
OBS = torch.tensor([[0, 0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 0, 0, 0], [0] * 7], dtype=torch.bool)  # [B, R]


def agent_batch(model, ref_model=None):
    completions = [Completion(p, r, [-1.0] * len(r), "stop", loss_mask=m) for p, r, m in ROWS]
    batch = collate(completions, pad_token_id=0)
    batch.advantages = torch.tensor([1.0, -0.5, 0.7])
    with torch.no_grad():
        batch.old_log_prob = response_log_probs(model, batch, 1.0, 64)[0] + 0.05  # off-policy: ratio != 1
        if ref_model is not None:
            batch.ref_log_prob = response_log_probs(ref_model, batch, 1.0, 64)[0]
    return batch


def test_collate_turns_the_loss_mask_into_the_response_mask_and_keeps_attention():
    batch = collate([Completion(p, r, [-1.0] * len(r), "stop", loss_mask=m) for p, r, m in ROWS], 0)
    assert batch.response_mask.tolist()[0] == [1, 1, 0, 0, 0, 1, 1]
    assert batch.response_mask.tolist()[1] == [1, 1, 0, 0, 1, 0, 0]
    assert batch.response_mask.tolist()[2] == [1, 1, 1, 0, 0, 0, 0]
    assert batch.attention_mask[:, batch.prompt_length :].tolist()[0] == [1] * 7  # observations attended to
    assert MiniBatchSizes.of(batch.response_mask).tokens == 4 + 3 + 3  # generated tokens only


def test_collate_rejects_a_mask_of_the_wrong_length_or_values():
    with pytest.raises(ValueError, match="loss mask of 2 for 3"):
        collate([Completion([1], [2, 3, 4], [0.0] * 3, "stop", loss_mask=[1, 0])], 0)
    with pytest.raises(ValueError, match="other than 0 and 1"):
        collate([Completion([1], [2, 3], [0.0] * 2, "stop", loss_mask=[1, 2])], 0)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_no_gradient_reaches_observation_positions(model, monkeypatch, mode):
    # each position's logits reach the loss only through that position's log-prob and entropy, so a zero
    # gradient on both is a zero gradient on the logits there
    ref = _perturbed(model)
    seen = {}

    def spy(*args, **kwargs):
        log_prob, entropy = response_log_probs(*args, **kwargs)
        for name, t in (("log_prob", log_prob), ("entropy", entropy)):
            if t.requires_grad:
                t.retain_grad()
            seen[name] = t
        return log_prob, entropy

    monkeypatch.setattr(actor_module, "response_log_probs", spy)
    cfg = ActorConfig(loss_agg_mode=mode, entropy_coeff=0.1, use_kl_loss=True, kl_loss_type="k1", kl_loss_coef=0.5)
    actor = Actor(model, ref, cfg, temperature=1.0, total_steps=1, n=3)
    batch = agent_batch(model, ref)
    loss, _ = actor._micro_loss(batch)
    loss.backward()
    for name in ("log_prob", "entropy"):
        grad = seen[name].grad  # [B, R]
        assert torch.equal(grad[OBS], torch.zeros(int(OBS.sum()))), name
        assert (grad[batch.response_mask.bool()] != 0).all(), name  # the generated tokens do train


def test_observation_positions_do_not_change_the_loss(model):
    ref = _perturbed(model)
    cfg = ActorConfig(entropy_coeff=0.1, use_kl_loss=True, kl_loss_type="k1", kl_loss_coef=0.5)
    actor = Actor(model, ref, cfg, temperature=1.0, total_steps=1, n=3)
    batch = agent_batch(model, ref)
    loss, parts = actor._micro_loss(batch)
    wild = agent_batch(model, ref)
    for field in ("old_log_prob", "ref_log_prob", "rollout_log_prob"):
        value = getattr(wild, field).clone()
        value[OBS] = torch.linspace(-30.0, 5.0, int(OBS.sum()))  # ratios and KL far off at observations
        setattr(wild, field, value)
    wild_loss, wild_parts = actor._micro_loss(wild)
    assert wild_loss.item() == loss.item()
    assert wild_parts == parts  # pg_loss, entropy, kl_loss, ppo_kl, clipfrac alike
    # and the token-mean divides by the generated tokens only: computed by hand
    log_prob = response_log_probs(model, batch, 1.0, 64)[0].detach()
    ratio = torch.exp(log_prob - batch.old_log_prob)
    adv = batch.advantages[:, None]
    loss_mat = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
    loss_mat = torch.where(adv < 0, torch.minimum(loss_mat, -adv * 3.0), loss_mat)
    mask = batch.response_mask
    assert parts["pg_loss"] == pytest.approx(((loss_mat * mask).sum() / 10).item(), abs=1e-6)


def _perturbed(model):
    import copy

    ref = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return ref
