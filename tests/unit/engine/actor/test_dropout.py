"""actor.disable_dropout: a policy whose config has dropout (GPT-2's default 0.1, a Qwen2's attention_dropout) takes an
on-policy step at ratio 1, as one without dropout does; false keeps the model's dropout in the update."""

from __future__ import annotations

import pytest
import torch

from rlrm.config.schema import ActorConfig
from rlrm.engine.actor.actor import Actor
from rlrm.engine.actor.batch import collate
from rlrm.engine.actor.dropout import disable_dropout
from rlrm.inference.base import Completion

SPECS = [([5, 9, 12], [4, 8, 3, 3]), ([7, 3], [1, 2, 3, 4]), ([11, 12, 13, 14], [9, 1]), ([2], [6, 6, 6])]


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)  # transformers' default dropouts: resid, embd and attn 0.1
    return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=4)).eval()


def _qwen2_attention_dropout():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)  # attention dropout only: a float the attention module passes on in train mode
    config = Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, attention_dropout=0.5, attn_implementation="eager",
    )  # fmt: skip
    return Qwen2ForCausalLM(config).eval()


def _on_policy_step(model, disable: bool) -> dict[str, float]:
    batch = collate([Completion(p, r, [-1.0] * len(r), "length") for p, r in SPECS], pad_token_id=0)
    batch.advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
    actor = Actor(model, None, ActorConfig(mini_batch_size=2, disable_dropout=disable), 1.0, total_steps=1, n=2)
    batch.old_log_prob = actor.compute_old_log_prob(batch)
    return actor.update(batch)


def _falcon_config_dropout():
    from transformers import FalconConfig, FalconForCausalLM

    torch.manual_seed(0)  # Falcon reads config.hidden_dropout in its forward: no module keeps it
    config = FalconConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, hidden_dropout=0.5,
        attention_dropout=0.5,
    )  # fmt: skip
    return FalconForCausalLM(config).eval()


@pytest.mark.parametrize(
    "make", [_gpt2, _qwen2_attention_dropout, _falcon_config_dropout], ids=["gpt2", "qwen2-attention", "falcon-config"]
)
def test_an_on_policy_step_of_a_policy_with_dropout_has_ratio_one(make):
    torch.manual_seed(1)
    kept = _on_policy_step(make(), disable=False)
    assert abs(kept["actor/ppo_kl"]) > 1e-4  # the update's forward was not the old log-probs' one
    torch.manual_seed(1)
    off = _on_policy_step(make(), disable=True)
    assert off["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-6) and off["actor/pg_clipfrac"] == 0.0


def test_disable_dropout_counts_what_it_zeroed_and_leaves_the_config():
    gpt2, qwen2 = _gpt2(), _qwen2_attention_dropout()
    assert disable_dropout(gpt2) == 1 + 2 * 3  # embd, and per layer attn, resid (attention) and resid (MLP)
    assert disable_dropout(qwen2) == 2  # each layer's attention module
    assert gpt2.config.attn_pdrop == 0.1 and qwen2.config.attention_dropout == 0.5  # config.json keeps the model's
    assert disable_dropout(gpt2) == 0
    gpt2.train()
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.equal(gpt2(ids).logits, gpt2(ids).logits)  # train mode, and nothing random left


def test_a_rate_named_pdrop_is_zeroed_and_the_configs_rates_are_back_after_the_update():
    class Block(torch.nn.Module):  # DBRX keeps self.resid_pdrop and calls F.dropout with it
        def __init__(self):
            super().__init__()
            self.resid_pdrop = 0.5

    block = Block()
    assert disable_dropout(block) == 1 and block.resid_pdrop == 0.0
    falcon = _falcon_config_dropout()
    _on_policy_step(falcon, disable=True)
    assert (falcon.config.hidden_dropout, falcon.config.attention_dropout) == (0.5, 0.5)  # config.json keeps them
