"""The actor: the trained policy, its optimizer, and the PPO/GRPO update over mini- and micro-batches.

    actor = Actor(model, ref_model=None, cfg=profile.actor, temperature=1.0, total_steps=100, n=8)
    batch.old_log_prob = actor.compute_old_log_prob(batch)
    metrics = actor.update(batch)          # ppo_epochs x mini-batches, each one optimizer step

A mini-batch is `cfg.mini_batch_size` prompts (times n samples, groups kept whole); it is split
into micro-batches of `cfg.micro_batch_size` samples whose losses are weighted so the accumulated
gradient equals the gradient of the whole mini-batch's loss, whatever the split.
"""

from __future__ import annotations

import math

import torch

from rlrm.config.schema import ActorConfig
from rlrm.engine.actor.batch import RolloutBatch
from rlrm.engine.actor.logprobs import response_log_probs
from rlrm.engine.algorithms import aggregate_loss, kl_penalty, policy_loss
from rlrm.errors import TrainingError


class Actor:
    def __init__(self, model, ref_model, cfg: ActorConfig, temperature: float, total_steps: int, n: int):
        self.model, self.ref_model, self.cfg = model, ref_model, cfg
        self.temperature, self.total_steps, self.n = temperature, total_steps, n
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay
        )
        warmup = cfg.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0
        )
        self.nonfinite_in_row = 0

    @torch.no_grad()
    def compute_old_log_prob(self, batch: RolloutBatch) -> torch.Tensor:
        """Log-probs [B, R] of the responses under the current policy, before the update."""
        self.model.eval()
        return response_log_probs(self.model, batch, self.temperature, self.cfg.micro_batch_size)[0]

    @torch.no_grad()
    def compute_ref_log_prob(self, batch: RolloutBatch) -> torch.Tensor:
        """Log-probs [B, R] under the frozen reference model."""
        return response_log_probs(self.ref_model, batch, self.temperature, self.cfg.micro_batch_size)[0]

    def update(self, batch: RolloutBatch) -> dict[str, float]:
        """PPO epochs over mini-batches (in order); one scheduler step per call.

        Raises:
            TrainingError: after `cfg.max_nonfinite_steps` non-finite updates in a row.
        """
        self.model.train()
        mini = self.cfg.mini_batch_size * self.n
        history: list[dict[str, float]] = []
        skipped = 0
        for _ in range(self.cfg.ppo_epochs):
            for start in range(0, len(batch), mini):
                rows = torch.arange(start, min(start + mini, len(batch)))
                stats = self._mini_batch_step(batch.select(rows))
                skipped += int(stats.pop("skipped"))
                history.append(stats)
        lr = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        self.model.eval()
        metrics = {f"actor/{k}": _nanmean([h[k] for h in history]) for k in history[0]}
        metrics["actor/lr"] = lr
        metrics["actor/nonfinite_skipped"] = skipped
        return metrics

    def _mini_batch_step(self, mb: RolloutBatch) -> dict[str, float]:
        cfg = self.cfg
        self.optimizer.zero_grad(set_to_none=True)
        totals = {"pg_loss": 0.0, "pg_clipfrac": 0.0, "ppo_kl": 0.0, "entropy": 0.0}
        if cfg.use_kl_loss:
            totals["kl_loss"] = 0.0
        loss_sum = 0.0
        for start in range(0, len(mb), cfg.micro_batch_size):
            micro = mb.select(torch.arange(start, min(start + cfg.micro_batch_size, len(mb))))
            weight = _micro_weight(cfg.loss_agg_mode, micro.response_mask, mb.response_mask)
            loss, parts = self._micro_loss(micro)
            (loss * weight).backward()
            loss_sum += loss.item() * weight
            for key, value in parts.items():
                totals[key] += value * weight
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip).item()
        if not (math.isfinite(loss_sum) and math.isfinite(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            self.nonfinite_in_row += 1
            if self.nonfinite_in_row >= cfg.max_nonfinite_steps:
                raise TrainingError(
                    f"{self.nonfinite_in_row} non-finite losses in a row (loss {loss_sum}, grad norm {grad_norm}); "
                    "lower actor.lr or check the rewards for NaN/inf"
                )
            return {**totals, "grad_norm": grad_norm, "skipped": 1.0}
        self.optimizer.step()
        self.nonfinite_in_row = 0
        return {**totals, "grad_norm": grad_norm, "skipped": 0.0}

    def _micro_loss(self, micro: RolloutBatch) -> tuple[torch.Tensor, dict[str, float]]:
        cfg = self.cfg
        log_prob, entropy = response_log_probs(
            self.model, micro, self.temperature, len(micro), with_entropy=True
        )  # [b, R]
        mask = micro.response_mask
        pg_loss, pg_metrics = policy_loss(
            log_prob,
            micro.old_log_prob,
            micro.advantages,
            mask,
            clip_low=cfg.clip_ratio_low,
            clip_high=cfg.clip_ratio_high,
            clip_c=cfg.clip_ratio_c,
            agg=cfg.loss_agg_mode,
        )
        entropy_loss = aggregate_loss(entropy, mask, cfg.loss_agg_mode)
        loss = pg_loss - cfg.entropy_coeff * entropy_loss
        parts = {
            "pg_loss": pg_loss.item(),
            "pg_clipfrac": pg_metrics["pg_clipfrac"],
            "ppo_kl": pg_metrics["ppo_kl"],
            "entropy": entropy_loss.item(),
        }
        if cfg.use_kl_loss:
            kl = aggregate_loss(kl_penalty(log_prob, micro.ref_log_prob, cfg.kl_loss_type), mask, cfg.loss_agg_mode)
            loss = loss + cfg.kl_loss_coef * kl
            parts["kl_loss"] = kl.item()
        return loss, parts

    def policy_state_dict(self) -> dict:
        """The weights to push to the rollout engine."""
        return {k: v.detach() for k, v in self.model.state_dict().items()}

    def state_dict(self) -> dict:
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "nonfinite_in_row": self.nonfinite_in_row,
        }

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.nonfinite_in_row = state["nonfinite_in_row"]


def _micro_weight(mode: str, micro_mask: torch.Tensor, mini_mask: torch.Tensor) -> float:
    """The share of the mini-batch loss a micro-batch's aggregated loss stands for."""
    if mode == "token-mean":
        return micro_mask.sum().item() / max(mini_mask.sum().item(), 1.0)
    if mode == "seq-mean-token-sum-norm":
        return 1.0  # a plain sum over sequences: the micro-batch sums add up
    valid = lambda m: (m.sum(-1) > 0).sum().item()  # noqa: E731
    return valid(micro_mask) / max(valid(mini_mask), 1)


def _nanmean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else float("nan")
