"""One GRPO step, written once: what every scheduling mode does with a batch of samples.

    grpo = GRPOStep(actor, engine, StepSettings.from_profile(profile, pad_token_id, device))
    batch, lp_metrics = grpo.prepare(completions, off_policy=False, timer=timer)  # collate; old/ref log-probs
    scored = grpo.score(batch, results, timer)                # drop failed groups; scores, GRPO advantages
    update = grpo.train(scored.batch, timer)                  # Actor.update (epochs x mini-batches)
    weights.publish(step, timer)                              # the mode's call: the engine gets version `step`
    record = StepRecord(step, [scored], ...)                  # what the mode hands the trainer
    outcome = grpo.finish(record)                             # the trainer's call: metrics row and samples

A mode (rlrm/engine/scheduling/<mode>.py) only says *when* these run and what overlaps with them:
sync calls them one after the other; stream and one-step-off `prepare` a batch as soon as it is
generated, while its rewards are still arriving (old and reference log-probs need the samples, not
their scores); pipeline hands `train` its first epoch's mini-batches one by one as their groups get
scored; fully-async runs them on whatever scored groups it takes. The maths never depends on the mode.
Moving the new weights to the rollout engine is not maths: each mode calls `PolicyWeights.publish`
(rlrm/engine/weights.py) where it decides that weights move.

Samples arrive prompt-major: group g (the n samples of prompt g) is rows g*n ... g*n+n-1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from rlrm.config.reward import RewardConfig
from rlrm.config.schema import ActorConfig, Profile
from rlrm.engine.actor.base import PolicyActor
from rlrm.engine.behaviour import needs_recompute
from rlrm.engine.metrics.timing import StepTimer
from rlrm.engine.rewards.agreement import agreement_metrics
from rlrm.engine.rewards.components import COMPONENTS_KEY, component_metrics, component_table
from rlrm.engine.rewards.reported import reported_metrics
from rlrm.errors import TrainingError, out_of_memory_named
from rlrm.inference.base import RolloutEngine
from rlrm.inference.tf32 import precision

if TYPE_CHECKING:  # torch-backed: imported where used, not at import time
    import torch

    from rlrm.engine.actor.batch import RolloutBatch


@dataclass(frozen=True)
class StepSettings:
    """What the step's maths reads from the profile, taken once."""

    n: int  # samples per prompt (the GRPO group size)
    pad_token_id: int
    device: str
    adv_eps: float
    norm_adv_by_std: bool
    recompute_old_log_prob: str  # auto | always | never (rlrm/engine/behaviour.py)
    component_norm: str = "none"  # none | gdpo (rlrm/engine/gdpo.py)
    reward: RewardConfig | None = None  # for reward/rule_agreement and reward/top1pct_share (none: not written)

    @classmethod
    def from_profile(cls, profile: Profile, pad_token_id: int, device: str) -> StepSettings:
        return cls(
            n=profile.rollout.n,
            pad_token_id=pad_token_id,
            device=device,
            adv_eps=profile.algorithm.adv_eps,
            norm_adv_by_std=profile.algorithm.norm_adv_by_std,
            recompute_old_log_prob=profile.actor.recompute_old_log_prob,
            component_norm=profile.algorithm.component_norm,
            reward=profile.reward,
        )


@dataclass
class Scored:
    """The trainable part of a prepared batch.

    Attributes:
        batch: the rows of the surviving groups, with `scores` and `advantages` set (None when
            every group was dropped).
        groups: positions (in the prepared batch) of the surviving groups, in order.
        dropped_groups: groups left out because one of their samples has no reward.
    """

    batch: RolloutBatch | None
    groups: list[int]
    dropped_groups: int


@dataclass
class StepRecord:
    """Everything a mode hands the trainer (which passes it to `finish`) about one trained step.

    Attributes:
        step: the step number (the policy version the update produced).
        scored: what was trained, one entry per call of `score` (pipeline: one per mini-batch).
        completions: every sample of the step's groups, prompt-major (dropped groups included).
        samples: (reward sample, result, completion) per sample, for samples.jsonl.
        metrics: metrics gathered on the way: rollout/* from `prepare`, actor/* from `train`,
            the reward loop's counters.
        dropped_prompts: prompts of the step's batch dropped for length before generation.
    """

    step: int
    scored: list[Scored]
    completions: list
    samples: list
    metrics: dict = field(default_factory=dict)
    dropped_prompts: int = 0


@dataclass
class StepOutcome:
    """A trained step: its metrics row (without the trainer's timing/perf/idle keys) and its samples."""

    metrics: dict
    samples: list


class GRPOStep:
    """The maths and bookkeeping of a GRPO step; see the module docstring.

    Args:
        actor: trains the policy (its `update` is the only epoch loop).
        engine: the rollout engine the samples come from (its `dtype` decides whether old log-probs are recomputed).
        settings: the profile's values these functions read.
    """

    def __init__(self, actor: PolicyActor, engine: RolloutEngine, settings: StepSettings):
        self.actor, self.engine, self.settings = actor, engine, settings
        # an update raised partway (out of memory, non-finite losses, a rank lost): the actor may hold some of
        # that step's optimizer steps, so its state is no checkpoint of the step before (the trainer keeps the last)
        self.update_stopped = False

    def prepare(self, completions: list, off_policy: bool, timer: StepTimer) -> tuple[RolloutBatch | None, dict]:
        """Collate `completions` and set their behaviour (old) and reference log-probs.

        On-policy, when `actor.recompute_old_log_prob` asks for it (rlrm/engine/behaviour.py: `auto`
        recomputes only for several epochs or an engine that may score differently), the actor
        recomputes the old log-probs and the gap to the rollout engine's own is logged
        (rollout/log_prob_diff_*). Otherwise, and always off-policy, the engine's log-probs are the
        behaviour policy's and are used as they are.

        Returns:
            (the batch on the actor's device, rollout/* metrics); no batch when there is no sample
            (every prompt of the batch dropped for length, or a fully-async step with nothing left).
        """
        import torch

        from rlrm.engine.actor.batch import collate

        s = self.settings
        metrics: dict = {}
        if not completions:
            return None, metrics
        lower = _lower_micro_batch(self.actor.cfg, len(completions), "forward pass")
        with timer("old_log_prob"), out_of_memory_named("computing log-probs", lower):
            batch = collate(completions, s.pad_token_id)
            batch.group_ids = torch.arange(len(completions)) // s.n  # [B]
            batch = batch.to(s.device)
            if self._recompute(off_policy):
                batch.old_log_prob = self.actor.compute_old_log_prob(batch)
                metrics = _log_prob_gap(batch)
            else:
                batch.old_log_prob = batch.rollout_log_prob
        if self.actor.has_ref_model:
            with timer("ref"), out_of_memory_named("computing reference log-probs", lower):
                batch.ref_log_prob = self.actor.compute_ref_log_prob(batch)
        return batch, metrics

    def _recompute(self, off_policy: bool) -> bool:
        actor = self.actor
        return needs_recompute(
            self.settings.recompute_old_log_prob,
            off_policy=off_policy,
            ppo_epochs=actor.cfg.ppo_epochs,
            engine_dtype=self.engine.dtype,
            actor_dtype=precision(actor.dtype, self.settings.device),  # "tf32": model.tf32 on CUDA (as the ranks')
        )

    def score(
        self, batch: RolloutBatch | None, results: list, timer: StepTimer, groups: Iterable[int] | None = None
    ) -> Scored:
        """Keep the groups whose samples all have a reward; set their scores and GRPO advantages.

        Args:
            batch: a prepared batch.
            results: one RewardResult (None: failed) per row of `batch`.
            groups: the group positions to consider (default: every group of the batch).
        """

        from rlrm.engine.actor.batch import filled
        from rlrm.engine.algorithms import grpo_advantages
        from rlrm.engine.turn_rewards import has_turn_scores, token_level_rewards

        n = self.settings.n
        if batch is None:
            return Scored(None, [], 0)
        with timer("adv"):
            candidates = range(len(batch) // n) if groups is None else list(groups)
            kept = [g for g in candidates if all(results[g * n + j] is not None for j in range(n))]
            dropped = len(candidates) - len(kept)
            if not kept:
                return Scored(None, [], dropped)
            rows = [g * n + j for g in kept for j in range(n)]
            out = batch.select(rows)
            kept_results = [results[i] for i in rows]
            # the outcome on each row's last generated token, per-turn rewards on each turn's (verl's token-level
            # rewards); GRPO normalises their sum over the response, as verl's compute_grpo_outcome_advantage does
            out.token_level_rewards = token_level_rewards(out, kept_results)  # [b, R]
            scores = out.token_level_rewards.sum(-1)  # [b]: score + sum(turn_scores)
            if self.settings.component_norm == "gdpo" and has_turn_scores(kept_results):
                raise TrainingError(
                    "algorithm.component_norm=gdpo normalises reward components, but the reward also returned "
                    "turn_scores; return per-turn rewards with component_norm=none, or fold them into a component"
                )
            if self.settings.component_norm == "gdpo":
                advantages = self._gdpo(out, kept_results)
            else:
                advantages = grpo_advantages(
                    scores,
                    filled(out.group_ids, "group_ids").cpu(),
                    eps=self.settings.adv_eps,
                    norm_by_std=self.settings.norm_adv_by_std,
                )  # [b]
            out.scores, out.advantages = scores.to(self.settings.device), advantages.to(self.settings.device)
            out.token_level_rewards = out.token_level_rewards.to(self.settings.device)
        return Scored(out, kept, dropped)

    def _gdpo(self, batch: RolloutBatch, results: list) -> torch.Tensor:
        """GDPO advantages [b] of the kept rows from their reward components (rlrm/engine/gdpo.py).

        The whitening runs over the rows scored together: the whole batch in every mode but pipeline,
        whose mini-batches are scored (and whitened) one at a time, and fully-async, over the groups it takes.
        """
        from rlrm.engine.actor.batch import filled
        from rlrm.engine.gdpo import gdpo_advantages

        s = self.settings
        weights, default = (s.reward.weights_of_components, s.reward.default_score) if s.reward else ({}, 0.0)
        names, rows, weights = component_table(results, weights, default)
        if not names:
            failed = [
                r.extra["reward_error"] for r in results if r.extra.get("reward_failed") and "reward_error" in r.extra
            ]
            if failed:  # the components were there, but NaN or not numbers: say so, not that none were reported
                raise TrainingError(
                    f"algorithm.component_norm=gdpo, but {len(failed)} of {len(results)} samples failed their reward "
                    f"and none reported usable components (the last: {failed[-1]}); fix the reward function"
                )
            raise TrainingError(
                "algorithm.component_norm=gdpo, but no sample of the step reported reward components; return "
                f"{{'score': ..., '{COMPONENTS_KEY}': {{name: value}}}} from the reward function, or set "
                "reward.component_weights"
            )
        return gdpo_advantages(
            rows,
            weights,
            filled(batch.group_ids, "group_ids").cpu(),
            batch.response_mask.sum(-1).cpu(),
            eps=s.adv_eps,
            norm_by_std=s.norm_adv_by_std,
        )

    def train(self, batch: RolloutBatch | Iterable[RolloutBatch] | None, timer: StepTimer) -> dict:
        """Update the actor on `batch` (the caller then publishes the weights, rlrm/engine/weights.py).

        Args:
            batch: the scored batch, or the first epoch's scored mini-batches as they become ready
                (pipeline mode; see `Actor.update`), or None when nothing survived (no update).
            timer: `timing_s/update_actor` sums the mini-batches; each is a `minibatch` trace span.

        Returns:
            actor/* metrics (empty when nothing was trained).
        """

        from rlrm.engine.actor.batch import RolloutBatch

        stepped = False
        feed = _Feed(batch) if batch is not None and not isinstance(batch, RolloutBatch) else None

        def timed(epoch: int, index: int, mb, start: float, end: float) -> None:
            nonlocal stepped
            stepped = True
            timer.add("update_actor", "trainer", start, end)
            timer.span("minibatch", f"mini-batch {index}", start, end, {"epoch": epoch, "samples": len(mb)})

        with timer.cpu_time("update_actor"):
            cfg = self.actor.cfg
            lower = _lower_micro_batch(cfg, cfg.mini_batch_size * self.settings.n, "forward and backward") + (
                " (the update stays the same, its gradients accumulate)"
            )
            try:
                with out_of_memory_named("in the actor update", lower):
                    return self.actor.update(feed or batch, on_mini_batch=timed) if batch is not None else {}
            except BaseException:
                # the actor is still the last step's when the mini-batches' source (pipeline: the failure budget,
                # checked before each one) stopped the update before its first optimizer step: checkpointable
                self.update_stopped = stepped or feed is None or not feed.raised
                raise

    def finish(self, record: StepRecord) -> StepOutcome:
        """The step's metrics row: counters, scores, advantages, lengths and staleness of what was trained,
        and how far the reward agrees with the rule on every sample scored (rlrm/engine/rewards/agreement.py)."""
        import torch

        from rlrm.engine.actor.batch import filled

        n = self.settings.n
        trained = [record.completions[g * n + j] for s in record.scored for g in s.groups for j in range(n)]
        metrics = {
            **record.metrics,
            "reward/dropped_groups": sum(s.dropped_groups for s in record.scored),
            "data/dropped_prompts": record.dropped_prompts,
            **staleness_metrics(trained, record.step - 1),
            **trajectory_metrics(trained),
        }
        if self.settings.reward is not None:
            metrics.update(agreement_metrics(self.settings.reward, ((t[0], t[1]) for t in record.samples)))
            metrics.update(component_metrics(t[1] for t in record.samples))
            metrics.update(reported_metrics(t[1] for t in record.samples))
        batches = [s.batch for s in record.scored if s.batch is not None]
        if not batches:
            return StepOutcome({**metrics, "batch/num_samples": 0}, record.samples)
        scores = torch.cat([filled(b.scores, "scores").cpu() for b in batches])
        advantages = torch.cat([filled(b.advantages, "advantages").cpu() for b in batches])
        return StepOutcome({**metrics, **batch_metrics(trained, scores, advantages)}, record.samples)


def trajectory_metrics(completions: list) -> dict[str, float]:
    """agent/turns_mean, observation_tokens_mean, max_turns_ratio and mixed_version_ratio over the trained agent
    trajectories (empty when none is one), so that off-policy modes report the step's own, not the ones
    generated while it waited (fully-async's step 1 held three batches' and later rows none)."""
    agents = [c for c in completions if "agent" in (c.meta or {})]
    if not agents:
        return {}
    n = len(agents)
    return {
        "agent/turns_mean": sum(sum(t["role"] == "assistant" for t in c.meta["agent"]["turns"]) for c in agents) / n,
        "agent/observation_tokens_mean": sum(len(c.loss_mask) - sum(c.loss_mask) for c in agents) / n,
        "agent/max_turns_ratio": sum(c.finish_reason == "max_turns" for c in agents) / n,
        "agent/mixed_version_ratio": sum(len(set(c.meta["agent"]["policy_versions"])) > 1 for c in agents) / n,
    }


def staleness_metrics(completions: list, trainer_version: int) -> dict[str, float]:
    """async/staleness_*: how many policy versions behind the trainer each trained sample's policy was."""
    lags = [trainer_version - c.policy_version for c in completions] or [0]
    return {"async/staleness_mean": sum(lags) / len(lags), "async/staleness_max": max(lags)}


def batch_metrics(completions: list, scores: torch.Tensor, advantages: torch.Tensor) -> dict[str, float]:
    """critic/*, response_length/* and token counts of the trained samples (scores, advantages: [B]).

    `critic/advantages/*` are over the trained response tokens, as verl's (each sample's advantage once per token
    the loss reads; a sample with none, all masked, counts in none); `critic/score/*` over samples."""
    import torch

    resp = [len(c.token_ids) for c in completions]
    prompt = [len(c.prompt_ids) for c in completions]
    clipped = sum(c.finish_reason == "length" for c in completions)
    trained = torch.tensor(
        [len(c.token_ids) if c.loss_mask is None else sum(c.loss_mask) for c in completions], dtype=torch.float64
    )
    counted = advantages.double()[trained > 0]
    mean = float((advantages.double() * trained).sum() / trained.sum()) if counted.numel() else float("nan")
    return {
        "critic/score/mean": scores.mean().item(),
        "critic/score/max": scores.max().item(),
        "critic/score/min": scores.min().item(),
        "critic/advantages/mean": mean,
        "critic/advantages/max": counted.max().item() if counted.numel() else float("nan"),
        "critic/advantages/min": counted.min().item() if counted.numel() else float("nan"),
        "response_length/mean": sum(resp) / len(resp),
        "response_length/max": max(resp),
        "response_length/min": min(resp),
        "response_length/clip_ratio": clipped / len(resp),
        "prompt_length/mean": sum(prompt) / len(prompt),
        "perf/total_num_tokens": sum(resp) + sum(prompt),
        "perf/response_tokens": sum(resp),
        "batch/num_samples": len(completions),
    }


def _log_prob_gap(batch: RolloutBatch) -> dict[str, float]:
    """How far the rollout engine's log-probs are from the actor's (0 up to float noise while in sync)."""
    from rlrm.engine.actor.batch import filled

    gap = (filled(batch.old_log_prob, "old_log_prob") - batch.rollout_log_prob).abs() * batch.response_mask  # [B, R]
    return {
        "rollout/log_prob_diff_mean": (gap.sum() / batch.response_mask.sum().clamp(min=1)).item(),
        "rollout/log_prob_diff_max": gap.max().item(),
    }


def _lower_micro_batch(cfg: ActorConfig, samples: int, what: str) -> str:
    """What to lower when a phase that runs `samples` samples (split over the ranks) in micro-batches ran out of
    GPU memory: actor.micro_batch_size, and below what when it is already more than a rank's share."""
    share = -(-samples // cfg.world_size)  # a rank's share, rounded up
    if cfg.micro_batch_size < share:
        return f"actor.micro_batch_size (now {cfg.micro_batch_size} samples a {what})"
    now = cfg.micro_batch_size
    return f"actor.micro_batch_size (now {now}: a {what} takes all {share} samples here; set it below {share})"


class _Feed:
    """Pipeline's mini-batches as they come, noting whether fetching one (not training it) raised."""

    def __init__(self, source: Iterable[RolloutBatch]):
        self._source = iter(source)
        self.raised = False

    def __iter__(self):
        return self

    def __next__(self) -> RolloutBatch:
        try:
            return next(self._source)
        except StopIteration:
            raise
        except BaseException:
            self.raised = True
            raise
