"""Rewards for trajectories: per-turn rewards on each turn's last generated token, and GRPO on their sum (verl).

A real trajectory from the agent loop (scripted engine, tiny tokenizer, the calculator), its reward through
the reward loop, then the step's collate and score: where each reward lands, and the advantage against
verl's `compute_grpo_outcome_advantage` written out here.
"""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from rlrm.config.reward import RewardConfig
from rlrm.engine.actor.batch import collate
from rlrm.engine.metrics.timing import StepTimer
from rlrm.engine.rewards.base import RewardResult, RewardSample
from rlrm.engine.rewards.loop import RewardLoop
from rlrm.engine.scheduling.requests import reward_samples
from rlrm.engine.step import GRPOStep, StepSettings
from rlrm.errors import TrainingError
from rlrm.inference.base import Completion
from tests.unit.engine.agent.test_agent_loop import ScriptedEngine, run
from tests.unit.engine.test_step import RecordingEngine

SCRIPT = ["A <call>calculator 12+34</call>", "B <call>calculator 46*2</call>", "#### 92<|im_end|>"]


@pytest.fixture(scope="module")
def tokenizer(tiny_policy_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_policy_path)


class Example:
    uid, data_source, prompt, ground_truth, extra_info = "p0", "test", [{"role": "user", "content": "q"}], "92", {}


def trajectory(tokenizer) -> Completion:
    traj, _ = run(ScriptedEngine(tokenizer, SCRIPT), tokenizer, prompt="What is (12+34)*2?")
    return traj


def single_turn(tokenizer) -> Completion:
    ids = tokenizer.encode("#### 92<|im_end|>", add_special_tokens=False)
    return Completion(tokenizer.encode("What?", add_special_tokens=False), ids, [-0.5] * len(ids), "stop")


def score_with(fn, samples, **cfg) -> tuple[list, dict]:
    loop = RewardLoop(fn, RewardConfig(**cfg))
    results = asyncio.run(loop.score_all(samples))
    return results, loop.take_metrics()


def grpo(norm="none") -> GRPOStep:
    settings = StepSettings(
        n=2,
        pad_token_id=0,
        device="cpu",
        adv_eps=1e-6,
        norm_adv_by_std=True,
        recompute_old_log_prob="never",
        component_norm=norm,
    )
    return GRPOStep(None, RecordingEngine(), settings)  # score() needs no actor


def collated(completions):
    """The batch `GRPOStep.prepare` makes, without the actor's log-probs (score() reads neither)."""
    batch = collate(completions, pad_token_id=0)
    batch.group_ids = torch.arange(len(completions)) // 2
    return batch


def verl_grpo(token_level_rewards, index, epsilon=1e-6):
    """verl's core_algos.compute_grpo_outcome_advantage, written out: sum over the response, then per group."""
    scores = token_level_rewards.sum(dim=-1)
    groups: dict = {}
    for i, g in enumerate(index):
        groups.setdefault(g, []).append(scores[i])
    out = scores.clone()
    for i, g in enumerate(index):
        values = torch.stack(groups[g])
        mean, std = (values.mean(), values.std()) if len(values) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
        out[i] = (scores[i] - mean) / (std + epsilon)
    return out


def test_turn_scores_land_on_each_turns_last_generated_token_and_grpo_sums_them(tokenizer):
    completions = [trajectory(tokenizer), single_turn(tokenizer)]
    samples = reward_samples(tokenizer, [Example()], completions, 2)
    assert [t["role"] for t in samples[0].extra_info["turns"]] == [
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]

    async def reward(sample: RewardSample):
        turns = sum(t["role"] == "assistant" for t in sample.extra_info.get("turns", [])) or 1
        return {"score": 1.0, "turn_scores": [0.25 * (k + 1) for k in range(turns)]}

    results, metrics = score_with(reward, samples)
    assert results[0].extra["turn_scores"] == [0.25, 0.5, 0.75] and results[1].extra["turn_scores"] == [0.25]
    scored = grpo().score(collated(completions), results, StepTimer())
    rewards, mask = scored.batch.token_level_rewards, scored.batch.response_mask
    # trajectory: each turn ends right before an observation (mask 1 then 0), the last at the final token
    loss_mask = completions[0].loss_mask
    ends = [
        i for i in range(len(loss_mask)) if loss_mask[i] == 1 and (i + 1 == len(loss_mask) or loss_mask[i + 1] == 0)
    ]
    assert len(ends) == 3
    placed = rewards[0].nonzero().flatten().tolist()
    assert placed == ends and all(mask[0, i] == 1 for i in placed)
    assert rewards[0, ends].tolist() == pytest.approx([0.25, 0.5, 0.75 + 1.0])  # the outcome joins the last turn
    assert rewards[0][mask[0] == 0].abs().sum() == 0  # never on an observation token
    # single-turn: its one turn score and the outcome on its last token
    last = len(completions[1].token_ids) - 1
    assert rewards[1].nonzero().flatten().tolist() == [last] and rewards[1, last].item() == pytest.approx(1.25)
    # GRPO normalises the summed token-level rewards, exactly verl's formula
    assert scored.batch.scores.tolist() == pytest.approx([2.5, 1.25])
    expected = verl_grpo(rewards, [0, 0])
    assert torch.allclose(scored.batch.advantages, expected, atol=1e-6)
    assert metrics["reward/turn_score_errors"] == 0


def test_scores_without_turn_scores_stay_what_the_reward_said(tokenizer):
    completions = [trajectory(tokenizer), single_turn(tokenizer)]
    scored = grpo().score(collated(completions), [RewardResult(0.3), RewardResult(-1.7)], StepTimer())
    assert scored.batch.scores.tolist() == pytest.approx([0.3, -1.7])
    assert (scored.batch.token_level_rewards != 0).sum(-1).tolist() == [1, 1]


@pytest.mark.parametrize(
    "turn_scores, counter",
    [
        ([1.0, 2.0], "reward/turn_score_errors"),  # 3 turns: wrong length
        ([1.0, 2.0, 3.0, 4.0], "reward/turn_score_errors"),
        ("0.5", "reward/turn_score_errors"),
        ([1.0, True, 3.0], "reward/turn_score_errors"),
        ([1.0, None, 3.0], "reward/turn_score_errors"),
        ([1.0, math.nan, 3.0], "reward/nonfinite"),
        ([1.0, 2.0, math.inf], "reward/nonfinite"),
    ],
)
def test_bad_turn_scores_are_counted_failures_never_a_silent_zero(tokenizer, turn_scores, counter):
    samples = reward_samples(tokenizer, [Example()], [trajectory(tokenizer)], 1)

    async def reward(sample):
        return {"score": 1.0, "turn_scores": turn_scores}

    results, metrics = score_with(reward, samples, on_failure="default", default_score=-5.0)
    assert results[0].extra["reward_failed"] and results[0].score == -5.0
    assert "turn_scores" in results[0].extra["reward_error"]
    assert metrics[counter] == 1 and metrics["reward/failures"] == 1 and metrics["reward/defaulted"] == 1


def test_a_single_turn_sample_takes_exactly_one_turn_score(tokenizer):
    samples = reward_samples(tokenizer, [Example()], [single_turn(tokenizer)], 1)

    async def two(sample):
        return {"score": 1.0, "turn_scores": [0.1, 0.2]}

    results, metrics = score_with(two, samples, on_failure="drop-group")
    assert results == [None] and metrics["reward/turn_score_errors"] == 1


def test_tool_rewards_count_as_turn_scores_only_when_asked(tokenizer):
    turns = [
        {
            "role": "assistant",
            "text": "<call>t 1</call>",
            "tool_call": {"name": "t", "arguments": "1"},
            "tool_reward": 0.5,
        },
        {"role": "tool", "name": "t", "text": "ok"},
        {"role": "assistant", "text": "<call>t 2</call>", "tool_call": {"name": "t", "arguments": "2"}},
        {"role": "tool", "name": "t", "text": "ok"},
        {"role": "assistant", "text": "done"},
    ]
    sample = RewardSample("p0", 0, "test", [], "...", "", {"turns": turns, "tool_rewards": [0.5]})

    async def plain(sample):
        return 1.0

    async def with_turns(sample):
        return {"score": 1.0, "turn_scores": [0.0, 1.0, 2.0]}

    off, _ = score_with(plain, [sample])
    assert "turn_scores" not in off[0].extra
    on, _ = score_with(plain, [sample], tool_rewards_as_turn_scores=True)
    assert on[0].extra["turn_scores"] == [0.5, 0.0, 0.0]
    both, _ = score_with(with_turns, [sample], tool_rewards_as_turn_scores=True)
    assert both[0].extra["turn_scores"] == [0.5, 1.0, 2.0]


def test_the_agent_loop_records_each_turns_tokens_and_its_tool_reward(tokenizer):
    traj = trajectory(tokenizer)
    turns = traj.meta["agent"]["turns"]
    assert sum(t["tokens"] for t in turns) == len(traj.token_ids)
    observed = [t["tokens"] for t in turns if t["role"] == "tool"]
    assert sum(observed) == traj.loss_mask.count(0)


def test_gdpo_with_turn_scores_is_refused_in_one_line(tokenizer):
    completions = [single_turn(tokenizer), single_turn(tokenizer)]
    results = [RewardResult(1.0, {"turn_scores": [0.5]}), RewardResult(0.0, {"turn_scores": [0.5]})]
    with pytest.raises(TrainingError, match="component_norm=gdpo .* turn_scores"):
        grpo(norm="gdpo").score(collated(completions), results, StepTimer())


def test_a_turn_that_generated_nothing_gives_its_reward_to_the_last_generated_token():
    turns = [
        {"role": "assistant", "tokens": 2},
        {"role": "tool", "tokens": 1},
        {"role": "assistant", "tokens": 0},  # an engine that answered nothing
        {"role": "tool", "tokens": 1},
        {"role": "assistant", "tokens": 2},
    ]
    empty = Completion(
        [1], [5, 6, 7, 8, 9, 10], [-1.0] * 6, "stop", meta={"agent": {"turns": turns}}, loss_mask=[1, 1, 0, 0, 1, 1]
    )
    plain = Completion([1], [5, 6], [-1.0] * 2, "stop")
    results = [RewardResult(1.0, {"turn_scores": [0.1, 0.2, 0.4]}), RewardResult(0.0)]
    rewards = grpo().score(collated([empty, plain]), results, StepTimer()).batch.token_level_rewards
    assert rewards[0].tolist() == pytest.approx([0.0, 0.1, 0.0, 0.0, 0.0, 0.2 + 0.4 + 1.0])
