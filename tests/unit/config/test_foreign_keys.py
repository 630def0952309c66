"""Other tools' names for rlrm's settings (rlrm/config/foreign_keys.py): TRL's, verl's and OpenRLHF's keys are answered
with rlrm's, where a spelling match pointed at keys that mean something else (TRL's `num_generations` at
`rollout.max_new_tokens`: a user who followed it got 5-token answers, rollout.n unchanged)."""

from __future__ import annotations

import pytest

from rlrm.config.loader import load_profile
from rlrm.errors import ConfigError


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("rollout.num_generations", "rollout.n"),
        ("data.max_response_length", "rollout.max_new_tokens"),
        ("actor.beta", "actor.kl_loss_coef"),
        ("trainer.max_steps", "trainer.total_steps"),
        ("trainer.save_steps", "trainer.save_every"),
        ("actor.gradient_accumulation_steps", "actor.mini_batch_size"),
        ("model.name_or_path", "model.path"),
        ("actor_rollout_ref.rollout.n", "rollout.n"),
        ("actor_rollout_ref.actor.optim.lr", "actor.lr"),
        ("algorithm.kl_ctrl.kl_coef", "actor.kl_loss_coef"),
        ("n_samples_per_prompt", "rollout.n"),
    ],
)
def test_another_tools_key_is_answered_with_rlrms(key, meant):
    with pytest.raises(ConfigError, match=rf"unknown key .*: in rlrm, {meant.replace('.', '[.]')}") as refused:
        load_profile("tiny-rule", [f"{key}=1"])
    assert "did you mean" not in str(refused.value)


def test_verls_tree_names_only_keys_rlrm_has():
    # `actor_rollout_ref.rollout.name` was answered "in rlrm, rollout.name", which rlrm then refused
    with pytest.raises(ConfigError) as refused:
        load_profile("tiny-rule", ["actor_rollout_ref.rollout.name=vllm"])
    assert "rollout.name" not in str(refused.value).split(":", 1)[1] and "not nested" in str(refused.value)


def test_a_typo_of_rlrms_own_key_is_still_spelled_out(tmp_path):
    with pytest.raises(ConfigError, match=r"did you mean 'actor.lr'"):
        load_profile("tiny-rule", ["actor.lrr=1e-4"])
    profile = tmp_path / "trl.yaml"  # the same in a profile file
    profile.write_text("extends: tiny-rule\nrollout:\n  num_generations: 8\n")
    with pytest.raises(ConfigError, match="num_generations is TRL's name: in rlrm, rollout.n"):
        load_profile(str(profile))
