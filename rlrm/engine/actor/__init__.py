"""The actor: policy + reference log-probs, PPO/GRPO updates over mini- and micro-batches, weight export."""
