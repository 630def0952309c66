"""One GRPO step (rlrm/engine/step.py): dropping failed groups, advantages, the update, the metrics row."""

from __future__ import annotations

import copy

import pytest
import torch

from rlrm.config.schema import ActorConfig
from rlrm.engine.actor.actor import Actor
from rlrm.engine.metrics.timing import StepTimer
from rlrm.engine.rewards.base import RewardResult
from rlrm.engine.step import GRPOStep, Scored, StepRecord, StepSettings
from rlrm.engine.weights import PolicyWeights
from rlrm.inference.base import Completion


class RecordingEngine:
    """Stands in for the rollout engine: keeps what `update_weights` was given."""

    dtype = None  # log-probs from code other than the actor's

    def __init__(self):
        self.versions: list[int] = []

    def update_weights(self, state_dict: dict, version: int) -> None:
        self.versions.append(version)


def step_with(model, n=2, mini_batch_size=1, ppo_epochs=1, recompute="always"):
    cfg = ActorConfig(lr=1e-3, mini_batch_size=mini_batch_size, micro_batch_size=4, ppo_epochs=ppo_epochs)
    actor = Actor(model, None, cfg, temperature=1.0, total_steps=10, n=n)
    settings = StepSettings(
        n=n, pad_token_id=0, device="cpu", adv_eps=1e-6, norm_adv_by_std=True, recompute_old_log_prob=recompute
    )
    return GRPOStep(actor, RecordingEngine(), settings)


def completions(lengths=(2, 3, 1, 4, 2, 2)):
    return [Completion([5, 6, 7], list(range(8, 8 + r)), [-1.0] * r, "stop", policy_version=0) for r in lengths]


def results(*scores):
    return [None if s is None else RewardResult(float(s)) for s in scores]


def test_score_drops_groups_with_a_failed_sample_and_normalises_the_rest(model):
    grpo = step_with(model)
    batch, _ = grpo.prepare(completions(), off_policy=False, timer=StepTimer())
    # groups (n=2): g0 = (1, 0), g1 = (None, 1) failed, g2 = (3, 1)
    scored = grpo.score(batch, results(1, 0, None, 1, 3, 1), StepTimer())
    assert scored.groups == [0, 2] and scored.dropped_groups == 1
    assert scored.batch.scores.tolist() == [1.0, 0.0, 3.0, 1.0]
    # g0: mean 0.5, unbiased std sqrt(0.5) -> +-0.5/0.7071 = +-0.7071; g2: mean 2, std sqrt(2) -> +-0.7071
    assert scored.batch.advantages.tolist() == pytest.approx([0.70711, -0.70711, 0.70711, -0.70711], abs=1e-4)
    # the kept rows are rows 0, 1, 4, 5 of the prepared batch
    assert torch.equal(scored.batch.input_ids, batch.input_ids[[0, 1, 4, 5]])


def test_score_of_a_subset_of_groups_equals_the_same_rows_of_the_whole(model):
    grpo = step_with(model)
    batch, _ = grpo.prepare(completions(), off_policy=False, timer=StepTimer())
    res = results(1, 0, 0, 1, 3, 1)
    whole = grpo.score(batch, res, StepTimer())
    part = grpo.score(batch, res, StepTimer(), groups=[2])
    assert part.groups == [2] and part.dropped_groups == 0
    assert torch.equal(part.batch.advantages, whole.batch.advantages[4:])


def test_prepare_recomputes_old_log_probs_on_policy_only(model):
    grpo = step_with(model)
    on, metrics = grpo.prepare(completions(), off_policy=False, timer=StepTimer())
    off, off_metrics = grpo.prepare(completions(), off_policy=True, timer=StepTimer())
    # the completions carry -1.0 log-probs (not the model's): on-policy recomputes and logs the gap
    assert not torch.equal(on.old_log_prob, on.rollout_log_prob) and metrics["rollout/log_prob_diff_mean"] > 0
    assert torch.equal(off.old_log_prob, off.rollout_log_prob) and off_metrics == {}


def test_weights_are_published_even_when_nothing_survived(model):
    # a mode publishes after every update, an empty one included: the engine gets the unchanged weights as `step`
    grpo = step_with(model)
    before = copy.deepcopy(model.state_dict())
    assert grpo.train(None, timer=StepTimer()) == {}
    assert grpo.engine.versions == []  # training alone moves no weights
    weights = PolicyWeights(grpo.actor, grpo.engine)
    weights.publish(3, StepTimer())
    assert grpo.engine.versions == [3] and weights.version == 3
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_train_times_each_mini_batch(model):
    grpo = step_with(model, mini_batch_size=1, ppo_epochs=2)
    batch, _ = grpo.prepare(completions(), off_policy=False, timer=StepTimer())
    scored = grpo.score(batch, results(1, 0, 0, 1, 3, 1), StepTimer())
    timer = StepTimer()
    metrics = grpo.train(scored.batch, timer=timer)
    PolicyWeights(grpo.actor, grpo.engine).publish(1, timer)
    spans = [s for s in timer.spans if s.lane == "minibatch"]
    assert [(s.args["epoch"], s.name) for s in spans] == [(e, f"mini-batch {i}") for e in (0, 1) for i in range(3)]
    assert timer.durations["update_actor"] == pytest.approx(sum(s.end_s - s.start_s for s in spans))
    assert "actor/pg_loss" in metrics and grpo.engine.versions == [1]
    assert "update_weights" in timer.durations


def test_update_from_mini_batches_as_they_come_equals_the_whole_batch(model):
    # pipeline mode hands Actor.update an iterable of the first epoch's mini-batches; two epochs
    # over it must equal two epochs over the whole batch (the same split, the same order)
    a, b = step_with(copy.deepcopy(model), ppo_epochs=2), step_with(copy.deepcopy(model), ppo_epochs=2)
    res = results(1, 0, 0, 1, 3, 1)
    batch_a, _ = a.prepare(completions(), off_policy=False, timer=StepTimer())
    a.train(a.score(batch_a, res, StepTimer()).batch, timer=StepTimer())
    batch_b, _ = b.prepare(completions(), off_policy=False, timer=StepTimer())
    pieces = (b.score(batch_b, res, StepTimer(), groups=[g]).batch for g in range(3))
    b.train(pieces, timer=StepTimer())
    for (name, pa), pb in zip(a.actor.model.named_parameters(), b.actor.model.parameters()):
        assert torch.equal(pa, pb), name


def test_finish_counts_what_was_trained(model):
    grpo = step_with(model)
    comps = completions()
    for c, v in zip(comps, (0, 0, 1, 1, 2, 2)):
        c.policy_version = v
    batch, _ = grpo.prepare(comps, off_policy=True, timer=StepTimer())
    scored = grpo.score(batch, results(1, 0, None, 1, 3, 1), StepTimer())
    outcome = grpo.finish(StepRecord(step=3, scored=[scored], completions=comps, samples=["s"], dropped_prompts=2))
    m = outcome.metrics
    assert m["reward/dropped_groups"] == 1 and m["data/dropped_prompts"] == 2 and m["batch/num_samples"] == 4
    # trained samples: versions 0, 0, 2, 2 against trainer version 2 -> lags 2, 2, 0, 0
    assert m["async/staleness_mean"] == 1.0 and m["async/staleness_max"] == 2
    assert m["critic/score/mean"] == pytest.approx(1.25) and m["response_length/mean"] == pytest.approx(2.25)
    assert outcome.samples == ["s"]


def test_finish_when_every_group_dropped(model):
    grpo = step_with(model)
    record = StepRecord(step=1, scored=[Scored(None, [], 3)], completions=completions(), samples=[])
    m = grpo.finish(record).metrics
    assert m["batch/num_samples"] == 0 and m["reward/dropped_groups"] == 3 and "critic/score/mean" not in m


def test_a_step_without_samples_trains_nothing(model):
    grpo = step_with(model)
    batch, metrics = grpo.prepare([], off_policy=True, timer=StepTimer())
    scored = grpo.score(batch, [], StepTimer())
    assert batch is None and scored.batch is None and scored.dropped_groups == 0
    assert (
        grpo.finish(StepRecord(step=1, scored=[scored], completions=[], samples=[])).metrics["batch/num_samples"] == 0
    )


def test_critic_advantages_are_over_the_trained_tokens_as_verls():
    # one group: score 1 with 1 token, score 0 with 3 tokens: advantages +0.7071 and -0.7071 (unbiased std);
    # verl's mean over the response tokens is (0.7071 - 3 * 0.7071) / 4 = -0.3536, the mean over samples was 0
    from rlrm.engine.actor.batch import collate
    from rlrm.inference.base import Completion

    settings = StepSettings(
        n=2, pad_token_id=0, device="cpu", adv_eps=1e-6, norm_adv_by_std=True, recompute_old_log_prob="never"
    )
    step = GRPOStep(None, None, settings)
    completions = [Completion([5, 6], list(range(8, 8 + r)), [-1.0] * r, "stop") for r in (1, 3)]
    batch = collate(completions, 0)
    batch.group_ids = torch.zeros(2, dtype=torch.long)
    scored = step.score(batch, [RewardResult(1.0), RewardResult(0.0)], StepTimer())
    metrics = step.finish(StepRecord(step=1, scored=[scored], completions=completions, samples=[])).metrics
    assert metrics["critic/advantages/mean"] == pytest.approx(-0.35355, abs=1e-4)
    assert (metrics["critic/advantages/min"], metrics["critic/advantages/max"]) == pytest.approx(
        (-0.7071, 0.7071), abs=1e-4
    )
