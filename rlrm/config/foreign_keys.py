"""Other tools' names for rlrm's settings: a key TRL's GRPOConfig, verl's Hydra config or OpenRLHF's flags call it
by is answered with rlrm's key, before a spelling match offers a near name that means something else
(`num_generations` -> `max_new_tokens`, `beta` -> Adam's `betas`).

    foreign_hint("rollout.num_generations")
    # "num_generations is TRL's name: in rlrm, rollout.n"
"""

from __future__ import annotations

from collections.abc import Callable

# another tool's key (the end of a dotted key) -> (whose, what rlrm calls it)
FOREIGN: dict[str, tuple[str, str]] = {
    "num_generations": ("TRL's", "rollout.n"),
    "max_completion_length": ("TRL's", "rollout.max_new_tokens"),
    "learning_rate": ("TRL's", "actor.lr"),
    "beta": ("TRL's", "actor.kl_loss_coef, with actor.use_kl_loss=true"),
    "max_steps": ("TRL's", "trainer.total_steps"),
    "num_train_epochs": ("TRL's", "trainer.total_steps (rlrm counts steps)"),
    "save_steps": ("TRL's", "trainer.save_every"),
    "eval_steps": ("TRL's", "trainer.val_every"),
    "max_grad_norm": ("TRL's", "actor.grad_clip"),
    "epsilon": ("TRL's", "actor.clip_ratio_low"),
    "epsilon_high": ("TRL's", "actor.clip_ratio_high"),
    "loss_type": ("TRL's", "actor.loss_agg_mode"),
    "warmup_ratio": ("TRL's", "actor.warmup_steps (in steps)"),
    "per_device_train_batch_size": ("TRL's", "actor.micro_batch_size (data.train_batch_size counts prompts per step)"),
    "gradient_accumulation_steps": ("TRL's", "actor.mini_batch_size, in micro-batches of actor.micro_batch_size"),
    "model_name_or_path": ("TRL's", "model.path"),
    "name_or_path": ("transformers'", "model.path"),
    "actor_rollout_ref": ("verl's", "rollout.*, actor.* and model.* (rlrm's sections are not nested)"),
    "max_response_length": ("verl's", "rollout.max_new_tokens"),
    "optim.lr": ("verl's", "actor.lr"),
    "kl_ctrl.kl_coef": ("verl's", "actor.kl_loss_coef with actor.use_kl_loss=true (a loss term; no KL in the reward)"),
    "use_kl_in_reward": ("verl's", "actor.use_kl_loss (a loss term; no KL in the reward)"),
    "ppo_mini_batch_size": ("verl's", "actor.mini_batch_size"),
    "ppo_micro_batch_size_per_gpu": ("verl's", "actor.micro_batch_size"),
    "log_prob_micro_batch_size_per_gpu": ("verl's", "actor.micro_batch_size"),
    "save_freq": ("verl's", "trainer.save_every"),
    "test_freq": ("verl's", "trainer.val_every"),
    "total_training_steps": ("verl's", "trainer.total_steps"),
    "total_epochs": ("verl's", "trainer.total_steps (rlrm counts steps)"),
    "custom_reward_function": ("verl's", "reward.kind=custom with reward.custom.path and reward.custom.name"),
    "n_samples_per_prompt": ("OpenRLHF's", "rollout.n"),
    "generate_max_len": ("OpenRLHF's", "rollout.max_new_tokens"),
    "prompt_max_len": ("OpenRLHF's", "data.max_prompt_length"),
    "init_kl_coef": ("OpenRLHF's", "actor.kl_loss_coef, with actor.use_kl_loss=true"),
    "actor_learning_rate": ("OpenRLHF's", "actor.lr"),
    "rollout_batch_size": ("OpenRLHF's", "data.train_batch_size"),
    "micro_train_batch_size": ("OpenRLHF's", "actor.micro_batch_size"),
    "pretrain": ("OpenRLHF's", "model.path"),
    "reward_pretrain": ("OpenRLHF's", "reward.server.model"),
    "remote_rm_url": ("OpenRLHF's", "reward.server.addresses (an OpenAI-compatible judge) or a reward.custom function"),
}


def foreign_hint(key: str, known: Callable[[str], bool] = lambda key: False) -> str | None:
    """What rlrm calls `key` (a dotted key, or its unknown part), when another tool's name ends it; else None.
    `known` says whether a key is rlrm's: verl's `actor_rollout_ref.rollout.n` is rlrm's `rollout.n` only so."""
    verl, _, rest = key.partition(".")
    if verl == "actor_rollout_ref" and rest:  # verl's tree over rlrm's sections
        if known(rest):
            return f"{key} is verl's key: in rlrm, {rest} (rlrm's sections are not nested)"
        whose, ours = FOREIGN[verl]
        return foreign_hint(rest, known) or f"{verl} is {whose} name: in rlrm, {ours}"
    for name in sorted(FOREIGN, key=len, reverse=True):  # the longest match: kl_ctrl.kl_coef before a shorter one
        if key == name or key.endswith("." + name) or f".{name}." in f".{key}.":
            whose, ours = FOREIGN[name]
            return f"{name} is {whose} name: in rlrm, {ours}"
    return None
