"""The actor: the trained policy, its optimizer, and the PPO/GRPO update over mini- and micro-batches.

    actor = Actor(model, ref_model=None, cfg=profile.actor, temperature=1.0, total_steps=100, n=8, response_budget=256)
    batch.old_log_prob = actor.compute_old_log_prob(batch)
    metrics = actor.update(batch)          # ppo_epochs x mini-batches, each one optimizer step
    engine.update_weights(actor.policy_state_dict(), version=step)

A mini-batch is `cfg.mini_batch_size` prompts (their n samples each, groups kept whole, in batch
order); it is split into micro-batches of `cfg.micro_batch_size` samples whose losses are weighted
so the accumulated gradient equals the gradient of the whole mini-batch's loss, whatever the split.
A non-finite loss or gradient norm skips the optimizer step (counted); `cfg.max_nonfinite_steps`
skipped steps in a row stop training with a TrainingError. With float16 compute the loss is scaled
(`LOSS_SCALE_START`), and a step whose scaled gradient overflowed halves the scale instead, below 1 too
(as torch.amp.GradScaler does: advantages of 1e6 need 2^-4), down to `LOSS_SCALE_MIN`.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import torch

from rlrm.config.schema import ActorConfig
from rlrm.engine.actor.batch import RolloutBatch, filled
from rlrm.engine.actor.dropout import config_dropout_off, disable_dropout
from rlrm.engine.actor.logprobs import response_log_probs
from rlrm.engine.algorithms import aggregate_loss, kl_penalty, policy_loss
from rlrm.errors import ConfigError, TrainingError

# (epoch, index, mini_batch, start_s, end_s) after each optimizer step.
MiniBatchHook = Callable[[int, int, RolloutBatch, float, float], None]

# Metrics that are means over valid tokens: micro-batches are combined by token share.
_TOKEN_MEANS = ("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl")
# float16 compute: a dynamic loss scale, as torch.amp.GradScaler keeps one (its defaults): the loss is multiplied by
# it so that small gradients stay inside float16's range, the gradients divided by it before clipping; a step whose
# scaled gradient overflowed is skipped and the scale halved, and it doubles after this many clean steps.
LOSS_SCALE_START = 2.0**16
# GradScaler halves without a floor; this one stops at float16's smallest step: below it an overflow is a failure
LOSS_SCALE_MIN = 2.0**-24
LOSS_SCALE_GROWTH_STEPS = 2000


class UpdateLoop:
    """The epoch loop over mini-batches, shared by the in-process actor and the rank group's proxy.

    Subclasses set `cfg` (ActorConfig) and `n`, and implement `train_mini_batch(mb) -> stats` (one
    optimizer step) and `step_scheduler() -> lr`.
    """

    cfg: ActorConfig
    n: int

    def update(self, batch: RolloutBatch | Iterable[RolloutBatch], on_mini_batch: MiniBatchHook | None = None) -> dict:
        """PPO epochs over mini-batches, one optimizer step each; one scheduler step per call.

        This is the only epoch loop of rlrm: every scheduling mode trains through it.

        Args:
            batch: samples with `advantages` set; `old_log_prob` (else the rollout's log-probs
                are used) and, when `use_kl_loss`, `ref_log_prob`. It is split into mini-batches of
                whole groups here. Or the first epoch's mini-batches themselves, as an iterable that
                may wait for each one (pipeline mode trains groups as they get scored); later epochs
                then replay them in the same order, which is the split a whole batch would get.
            on_mini_batch: called as (epoch, index, mini_batch, start_s, end_s) after each optimizer
                step (the step's trace spans).

        Returns:
            actor/* metrics averaged over the mini-batches (non-finite ones left out), plus
            actor/lr (the rate this update used) and actor/nonfinite_skipped (steps skipped); empty
            when the iterable gave no mini-batch (no update, no scheduler step).

        Raises:
            TrainingError: after `cfg.max_nonfinite_steps` non-finite steps in a row.
        """
        first: Iterable[RolloutBatch]
        if isinstance(batch, RolloutBatch):
            first = (batch.select(rows) for rows in self.mini_batch_indices(batch))
        else:
            first = batch
        seen: list[RolloutBatch] = []
        history = []
        for epoch in range(self.cfg.ppo_epochs):
            for index, mb in enumerate(first if epoch == 0 else seen):
                self.check_update_batch(mb)
                start = time.perf_counter()
                history.append(self.train_mini_batch(mb))
                if on_mini_batch is not None:
                    on_mini_batch(epoch, index, mb, start, time.perf_counter())
                if epoch == 0 and self.cfg.ppo_epochs > 1:
                    seen.append(mb)
        return self.end_update(history) if history else {}

    def train_mini_batch(self, mb: RolloutBatch) -> dict[str, float]:
        """One optimizer step on a mini-batch; its statistics (each subclass implements it)."""
        raise NotImplementedError

    def step_scheduler(self) -> float:
        """One scheduler step; the learning rate the update used (each subclass implements it)."""
        raise NotImplementedError

    def check_update_batch(self, batch: RolloutBatch) -> None:
        """Raise ValueError when `batch` lacks what an update needs (advantages, ref log-probs)."""
        if batch.advantages is None:
            raise ValueError("the batch has no advantages; set batch.advantages before actor.update")
        if self.cfg.use_kl_loss and batch.ref_log_prob is None:
            raise ValueError("actor.use_kl_loss is on but the batch has no ref_log_prob (compute_ref_log_prob)")

    def end_update(self, history: list[dict[str, float]]) -> dict[str, float]:
        """Close one update (one scheduler step) and average the mini-batch statistics."""
        skipped = sum(int(h.pop("skipped")) for h in history)
        lr = self.step_scheduler()
        metrics = {f"actor/{k}": _nanmean([h[k] for h in history]) for k in history[0]} if history else {}
        metrics["actor/lr"] = lr
        metrics["actor/nonfinite_skipped"] = skipped
        return metrics

    def mini_batch_indices(self, batch: RolloutBatch) -> list[torch.Tensor]:
        """Row indices of each mini-batch: `cfg.mini_batch_size` whole groups, in batch order.

        Groups come from `batch.group_ids` (so a batch with dropped groups still splits on group
        boundaries); without them, consecutive runs of `mini_batch_size * n` samples.
        """
        size = self.cfg.mini_batch_size
        if batch.group_ids is None:
            rows = size * self.n
            return [torch.arange(s, min(s + rows, len(batch))) for s in range(0, len(batch), rows)]
        members: dict[int, list[int]] = {}
        for i, g in enumerate(batch.group_ids.tolist()):
            members.setdefault(g, []).append(i)
        groups = list(members.values())
        return [
            torch.tensor([i for group in groups[s : s + size] for i in group], dtype=torch.long)
            for s in range(0, len(groups), size)
        ]


class Actor(UpdateLoop):
    """Policy (trained), optional frozen reference, AdamW with linear warmup, PPO-clip updates.

    Args:
        model: the policy, a causal LM (its parameters are optimised in place).
        ref_model: the frozen reference for the KL loss, or None.
        cfg: the profile's `actor` section.
        temperature: the rollout sampling temperature (log-probs are taken at it).
        total_steps: training steps of the run (kept for schedules; the lr is constant after warmup).
        n: samples per prompt (the GRPO group size).
        compute_dtype: the dtype forward and backward run in; when it is not the parameters' own (float32
            master weights, `model.precision=mixed`), they run under `torch.autocast` to it. None: the
            parameters' dtype.
    """

    def __init__(
        self,
        model,
        ref_model,
        cfg: ActorConfig,
        temperature: float,
        total_steps: int,
        n: int,
        compute_dtype: torch.dtype | None = None,
        response_budget: int | None = None,
    ):
        self.model, self.ref_model, self.cfg = model, ref_model, cfg
        if cfg.disable_dropout:
            disable_dropout(model)
        # seq-mean-token-sum-norm's divisor: constant (the run's response budget), not the batch's longest response
        self.loss_norm = cfg.loss_scale_factor or response_budget
        self.compute_dtype = compute_dtype
        self.temperature, self.total_steps, self.n = temperature, total_steps, n
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=cfg.lr, betas=(cfg.betas[0], cfg.betas[1]), weight_decay=cfg.weight_decay
        )
        # Linear warmup that starts at lr/warmup, not 0 (a first step at lr 0 would be wasted),
        # reaches lr after `warmup` updates and stays there.
        warmup = cfg.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0
        )
        self.nonfinite_in_row = 0
        # Rank actors average gradients over `world_size` ranks (FSDP's reduce-scatter): they scale
        # each loss back up so the averaged gradient is the whole mini-batch's (1 here).
        self.grad_scale = 1.0
        self.share_prompts: bool | None = None  # see response_log_probs; rank actors fix it to True
        # float16 forward and backward over float32 weights: scale the loss (None: no scaling, the float32/bf16 case)
        self.loss_scale: float | None = LOSS_SCALE_START if compute_dtype == torch.float16 else None
        self.clean_steps = 0  # optimizer steps since the loss scale last changed

    @property
    def dtype(self) -> torch.dtype | str:
        """What the policy computes in: its parameters' dtype, or "bfloat16-autocast" (float16 alike) where forward and
        backward autocast float32 parameters (model.precision mixed). Autocast keeps the residual stream and the
        norms in float32, so its log-probs are not those of a copy held in bfloat16, nor of one in float32."""
        param = next(self.model.parameters()).dtype
        if self.compute_dtype is None or self.compute_dtype == param:
            return param
        return f"{str(self.compute_dtype).removeprefix('torch.')}-autocast"

    @property
    def has_ref_model(self) -> bool:
        return self.ref_model is not None

    def autocast(self):
        """The context forward and backward run in: autocast to `compute_dtype` under mixed precision."""
        param = next(self.model.parameters())
        if self.compute_dtype is None or self.compute_dtype == param.dtype:
            return contextlib.nullcontext()
        return torch.autocast(param.device.type, dtype=self.compute_dtype)

    # Nothing runs outside this process: the rest of `PolicyActor` (rlrm/engine/actor/base.py) has nothing to do.
    broken: str | None = None

    def write_shards(self, ckpt_dir: Path) -> None:
        """Nothing to add: the checkpoint's model/ and state.pt hold everything."""

    def peak_memory_gb(self) -> float | None:
        """None: the trainer's own peak memory (perf/max_memory_gb) is this actor's."""
        return None

    def close(self) -> None:
        """Nothing to stop."""

    @torch.no_grad()
    def compute_old_log_prob(self, batch: RolloutBatch) -> torch.Tensor:
        """Log-probs [B, R] of the responses under the current policy, before the update."""
        return self._log_probs(self.model, batch)

    @torch.no_grad()
    def compute_ref_log_prob(self, batch: RolloutBatch) -> torch.Tensor:
        """Log-probs [B, R] under the frozen reference model."""
        if self.ref_model is None:
            raise ValueError("the actor has no reference model; build it with one when actor.use_kl_loss is on")
        return self._log_probs(self.ref_model, batch)

    def _log_probs(self, model, batch: RolloutBatch) -> torch.Tensor:
        """Float32 log-probs [B, R] of the responses under `model`, in eval mode and the update's precision."""
        model.eval()
        with self.autocast():
            out = response_log_probs(
                model, batch, self.temperature, self.cfg.micro_batch_size, chunk_tokens=self.cfg.logits_chunk_tokens
            )[0]
        return out.float()

    def train_mini_batch(self, mb: RolloutBatch) -> dict[str, float]:
        """One optimizer step on one mini-batch.

        Returns:
            The step's statistics for `end_update` (a `skipped` flag among them).
        """
        self.model.train()
        try:
            with config_dropout_off(self.model) if self.cfg.disable_dropout else contextlib.nullcontext():
                return self._mini_batch_step(mb)
        finally:
            self.model.eval()

    def step_scheduler(self) -> float:
        """Advance the learning-rate schedule by one update; returns the rate the update used."""
        lr = self.optimizer.param_groups[0]["lr"]
        with warnings.catch_warnings():
            # Expected when every step so far was skipped as non-finite: the schedule still advances.
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step\\(\\)` before")
            self.scheduler.step()
        return lr

    def mini_batch_sizes(self, mb: RolloutBatch) -> MiniBatchSizes:
        """The valid tokens and sequences of the whole mini-batch (a rank's share is all of it here)."""
        return MiniBatchSizes.of(mb.response_mask, self.loss_norm)

    def reduce_sums(self, sums: dict[str, float]) -> dict[str, float]:
        """Sums over every rank's share of the mini-batch (one rank: the sums themselves)."""
        return sums

    def clip_grad_norm(self) -> float:
        """Clip the gradient to `cfg.grad_clip`; returns the norm before clipping."""
        return torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip).item()

    def _mini_batch_step(self, mb: RolloutBatch) -> dict[str, float]:
        """Accumulate the mini-batch gradient over micro-batches, clip, step (or skip if non-finite).

        Each micro-batch's loss is weighted by its share of the *whole* mini-batch's tokens or
        sequences (`mini_batch_sizes`), so the gradient is the mini-batch loss's whatever the split,
        across micro-batches here and across ranks in a rank actor (`rlrm.engine.actor.rank`).
        """
        cfg = self.cfg
        self.optimizer.zero_grad(set_to_none=True)
        sizes = self.mini_batch_sizes(mb)
        # each row's valid tokens read once: weighing a micro-batch then waits on no GPU work
        row_tokens = mb.response_mask.sum(-1).tolist()
        sums: dict[str, torch.Tensor] = {}  # 0-d tensors on the device, read once after the last backward
        for start in range(0, len(mb), cfg.micro_batch_size):
            end = min(start + cfg.micro_batch_size, len(mb))
            micro = mb.select(torch.arange(start, end))
            tokens = row_tokens[start:end]
            weight = _micro_weight(cfg.loss_agg_mode, tokens, mb.response_length, sizes)
            token_share = sum(tokens) / max(sizes.tokens, 1.0)
            loss, parts = self._micro_loss(micro)
            (loss * (weight * self.grad_scale * (self.loss_scale or 1.0))).backward()
            parts["loss"] = loss.detach()
            for key, value in parts.items():
                share = value * (token_share if key in _TOKEN_MEANS else weight)
                sums[key] = sums[key] + share if key in sums else share
        read = torch.stack([v.float() for v in sums.values()]).tolist() if sums else []
        totals = dict(zip(sums, read))
        loss_sum = totals.pop("loss", 0.0)
        totals = self.reduce_sums({**totals, "loss": loss_sum})
        loss_sum = totals.pop("loss")
        scale = self.loss_scale
        if scale is not None:  # the gradients as they would be unscaled (inf where the scaled ones overflowed)
            for param in self.params:
                if param.grad is not None:
                    param.grad.div_(scale)
            totals["loss_scale"] = scale
        grad_norm = self.clip_grad_norm()
        totals["grad_norm"] = grad_norm
        if math.isfinite(loss_sum) and math.isfinite(grad_norm):
            self.optimizer.step()
            self.nonfinite_in_row = 0
            self._grow_loss_scale()
            return {**totals, "skipped": 0.0}
        self.optimizer.zero_grad(set_to_none=True)  # nothing of this step may reach the weights
        if scale is not None and scale > LOSS_SCALE_MIN and math.isfinite(loss_sum):
            # the scaled gradient overflowed float16: skip the step with a smaller scale next time, not a failure
            self.loss_scale, self.clean_steps = scale / 2, 0
            return {**{k: float("nan") for k in totals}, "grad_norm": grad_norm, "loss_scale": scale, "skipped": 1.0}
        self.nonfinite_in_row += 1
        if self.nonfinite_in_row >= cfg.max_nonfinite_steps:
            at_floor = scale is not None and scale <= LOSS_SCALE_MIN and math.isfinite(loss_sum)
            fp16 = " (float16's backward overflows at every loss scale: use model.dtype=bfloat16)" if at_floor else ""
            raise TrainingError(
                f"{self.nonfinite_in_row} non-finite losses in a row (last: loss {loss_sum}, grad norm {grad_norm}), "
                f"actor.max_nonfinite_steps is {cfg.max_nonfinite_steps}; lower actor.lr, or check the rewards "
                f"and advantages for NaN/inf (critic/score, critic/advantages in metrics.jsonl){fp16}"
            )
        return {**{k: float("nan") for k in totals}, "grad_norm": grad_norm, "skipped": 1.0}

    def _grow_loss_scale(self) -> None:
        if self.loss_scale is not None:
            self.clean_steps += 1
            if self.clean_steps >= LOSS_SCALE_GROWTH_STEPS:
                self.loss_scale, self.clean_steps = self.loss_scale * 2, 0

    def _micro_loss(self, micro: RolloutBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The micro-batch's loss (aggregated as the mini-batch would be) and its parts, detached 0-d tensors."""
        cfg = self.cfg
        with self.autocast():
            log_prob, entropy = response_log_probs(
                self.model,
                micro,
                self.temperature,
                len(micro),
                with_entropy=True,
                entropy_grad=cfg.entropy_coeff > 0,
                share_prompts=self.share_prompts,
                chunk_tokens=cfg.logits_chunk_tokens,
            )  # [b, R] each, float32
        if entropy is None:  # asked for with with_entropy=True
            raise RuntimeError("response_log_probs returned no entropy though asked for it")
        mask = micro.response_mask
        old_log_prob = micro.old_log_prob if micro.old_log_prob is not None else micro.rollout_log_prob
        pg_loss, pg_metrics = policy_loss(
            log_prob,
            old_log_prob,
            filled(micro.advantages, "advantages"),
            mask,
            clip_low=cfg.clip_ratio_low,
            clip_high=cfg.clip_ratio_high,
            clip_c=cfg.clip_ratio_c,
            agg=cfg.loss_agg_mode,
        )
        entropy_loss = aggregate_loss(entropy, mask, cfg.loss_agg_mode)
        loss = pg_loss - cfg.entropy_coeff * entropy_loss if cfg.entropy_coeff > 0 else pg_loss
        parts = {"pg_loss": pg_loss.detach(), "entropy": entropy_loss.detach()}
        parts.update({k: pg_metrics[k] for k in _TOKEN_MEANS if k in pg_metrics})
        if cfg.use_kl_loss:
            ref_log_prob = filled(micro.ref_log_prob, "ref_log_prob")
            kl = aggregate_loss(kl_penalty(log_prob, ref_log_prob, cfg.kl_loss_type), mask, cfg.loss_agg_mode)
            loss = loss + cfg.kl_loss_coef * kl
            parts["kl_loss"] = kl.detach()
        return loss, parts

    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        """The policy weights (detached) for `engine.update_weights(state_dict, version)`."""
        return {k: v.detach() for k, v in self.model.state_dict().items()}

    def state_dict(self) -> dict:
        """Optimizer, scheduler, the non-finite counter and a float16 run's loss scale (the model is saved by the
        checkpoint code)."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "nonfinite_in_row": self.nonfinite_in_row,
            **({"loss_scale": self.loss_scale, "clean_steps": self.clean_steps} if self.loss_scale else {}),
        }

    def take_settings(self) -> None:
        """After a checkpoint's optimizer and scheduler are loaded: the lr, betas and weight decay of this run's
        profile, not the ones they saved (a resume takes what config.yaml says now, and names an edit in a note),
        at the point of the schedule they saved."""
        cfg, step = self.cfg, self.scheduler.last_epoch
        self.scheduler.base_lrs = [cfg.lr for _ in self.optimizer.param_groups]
        for group, factor in zip(self.optimizer.param_groups, self.scheduler.lr_lambdas, strict=True):
            group.update(
                initial_lr=cfg.lr,
                lr=cfg.lr * factor(step),
                betas=(cfg.betas[0], cfg.betas[1]),
                weight_decay=cfg.weight_decay,
            )
        self.scheduler._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def load_state_dict(self, state: dict, ckpt_dir: Path | None = None) -> None:
        """Restore what `state_dict` saved (the model's weights must already be loaded).

        Raises:
            ConfigError: the state was written by several ranks (its optimizer is sharded).
        """
        if state.get("sharded"):
            raise ConfigError(
                f"the checkpoint was written by {state.get('world_size')} actor ranks but this run has "
                f"actor.world_size=1; resume with actor.world_size={state.get('world_size')}"
            )
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.take_settings()
        self.nonfinite_in_row = int(state.get("nonfinite_in_row", 0))
        if self.loss_scale is not None and "loss_scale" in state:  # a float16 run resumed as float16
            self.loss_scale, self.clean_steps = float(state["loss_scale"]), int(state.get("clean_steps", 0))


@dataclass(frozen=True)
class MiniBatchSizes:
    """What the loss of a whole mini-batch divides by: its valid tokens, valid sequences, and the width.

    The width is seq-mean-token-sum-norm's divisor: actor.loss_scale_factor, else the run's response budget
    (rollout.max_new_tokens), the same every step as in verl, whose responses are padded to that length; the
    mini-batch's padded width R only where neither is known (an Actor built without a budget). Ranks and
    micro-batches use the mini-batch's, not the width of their own rows.
    """

    tokens: float
    seqs: int
    width: int

    @classmethod
    def of(cls, mask: torch.Tensor, norm: int | None = None) -> MiniBatchSizes:
        """The sizes of the rows of `mask` ([B, R] response mask); `norm`: the width (None: R)."""
        return cls(float(mask.sum().item()), _valid_rows(mask), norm or int(mask.shape[-1]))


def _micro_weight(mode: str, row_tokens: list[float], width: int, mini: MiniBatchSizes) -> float:
    """The share of the mini-batch loss that a micro-batch's aggregated loss stands for, from its rows' valid
    tokens and its padded response width.

    token-mean divides by the valid tokens and seq-mean-* by the valid sequences, so a
    micro-batch weighs its share of those; seq-mean-token-sum-norm divides by the mini-batch's width W,
    and a micro-batch's own loss by its padded width r, so it weighs r / W.
    """
    if mode == "token-mean":
        return sum(row_tokens) / max(mini.tokens, 1.0)
    if mode == "seq-mean-token-sum-norm":
        return width / mini.width
    return sum(1 for t in row_tokens if t > 0) / max(mini.seqs, 1)


def _valid_rows(mask: torch.Tensor) -> int:
    return int((mask.sum(-1) > 0).sum().item())


def _nanmean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else float("nan")
