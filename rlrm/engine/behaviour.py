"""Whether a step's old (behaviour) log-probs are recomputed by the actor or taken from the rollout engine.

    if needs_recompute(cfg.recompute_old_log_prob, off_policy=False, ppo_epochs=1,
                       engine_dtype="float32", actor_dtype="float32"):
        batch.old_log_prob = actor.compute_old_log_prob(batch)   # else: batch.rollout_log_prob

The PPO ratio divides by the log-probs of the policy that sampled the tokens. The rollout engine
returns them with every completion; the actor can compute them again, one extra forward pass over
the batch. TRL computes them only when a generation is trained on more than once
(`num_iterations > 1` or more steps per generation than gradient-accumulation steps) and takes the
live log-probs otherwise; verl recomputes by default because its engines (vLLM, SGLang in bf16, in
another process) score tokens differently from the FSDP actor.
"""

from __future__ import annotations


def needs_recompute(
    setting: str, *, off_policy: bool, ppo_epochs: int, engine_dtype: object, actor_dtype: object
) -> bool:
    """True when the actor must recompute the old log-probs of a batch.

    Args:
        setting: `actor.recompute_old_log_prob`. `always` and `never` decide alone (on-policy);
            `auto` recomputes only when the engine's log-probs may differ from the actor's by more
            than float noise or are reused over several epochs: `ppo_epochs > 1`, or an engine whose
            parameter dtype is unknown (`None`: code that scores tokens its own way, e.g. vLLM or
            SGLang servers) or differs from the actor's. rlrm's embedded policy servers run the
            in-process engine's code and report their dtype, so they count as that engine. Float32
            computed in TF32 is "tf32" on either side (`model.tf32` or a server's `--tf32`, on a GPU):
            it moves log-probs by more than float32's rounding.
        off_policy: the samples may come from older policies (one-step-off, fully-async). The
            engine's log-probs are then the behaviour policy's and the actor no longer holds the
            weights that sampled them, so they are never recomputed, whatever the setting.
        ppo_epochs: passes over the batch (`actor.ppo_epochs`).
        engine_dtype: the rollout engine's parameter dtype (torch.dtype or its name), or None when
            its log-probs come from other code.
        actor_dtype: what the actor computes in: its parameter dtype, or "bfloat16-autocast" for float32
            parameters under autocast (model.precision mixed in the trainer process), which no engine matches.
    """
    if setting not in ("auto", "always", "never"):
        raise ValueError(f"recompute_old_log_prob must be auto, always or never, got {setting!r}")
    if off_policy or setting == "never":
        return False
    if setting == "always":
        return True
    return ppo_epochs > 1 or engine_dtype is None or _name(engine_dtype) != _name(actor_dtype)


def _name(dtype: object) -> str:
    """The dtype's name, e.g. float32 for torch.float32 (a served engine reports a name, the actor a torch.dtype)."""
    return str(dtype).removeprefix("torch.")
