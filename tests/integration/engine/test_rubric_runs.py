"""Rubric rewards through the real tiny judge: rlrm serves it (one embedded server, one thread), the reward loop
asks it each criterion of the tiny-rubric profile per sample, and every criterion's verdict is a component of the
sample's reward; then a 2-step tiny-rubric run with GDPO on those components."""

from __future__ import annotations

import asyncio
import json

import pytest
from small_run import SMALL_RUN

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.reward_service import RewardService
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.components import component_table
from rlrm.engine.trainer import start_run, train

QUESTION = "What is 12 + 34?"
RESPONSES = {"12 + 34 = 46\n#### 46": 1.0, "#### 46": 1.0, "12 + 34 = 45\n#### 45": 0.0, "#### 64": 0.0}


def samples() -> list[RewardSample]:
    prompt = [{"role": "user", "content": QUESTION}]
    return [RewardSample(f"p{i}", i, "synthetic", prompt, text, "46") for i, text in enumerate(RESPONSES)]


def test_each_criterion_of_the_rubric_is_asked_of_the_tiny_judge_and_kept_as_a_component(tiny_policy_path):
    cfg = load_profile("tiny-rubric", ["reward.cache.enabled=false"]).reward

    async def scenario():
        service = RewardService(cfg)
        await service.start()
        try:
            return await service.loop.score_all(samples()), service.loop.take_metrics()
        finally:
            await service.close()

    results, metrics = asyncio.run(scenario())
    assert metrics["reward/failures"] == 0 and metrics["reward/model_calls"] == 2 * len(RESPONSES)  # K=2 per sample
    for result, right in zip(results, RESPONSES.values()):
        # correct: 'Score: 10' / 10 = 1 (right) or 0; correct_half: the same verdict / 20 = 0.5 or 0
        assert result.extra["reward_components"] == {"correct": right, "correct_half": right / 2}
        assert result.score == pytest.approx(1.0 * right + 0.2 * right / 2)  # 1.1 for a right answer, 0 otherwise
        assert set(result.extra["judge_verdicts"]) == {"correct", "correct_half"}
    names, rows, weights = component_table(results, cfg.weights_of_components, cfg.default_score)
    assert names == ["correct", "correct_half"] and weights == [1.0, 0.2]  # GDPO sees both criteria
    assert rows == [[1.0, 0.5], [1.0, 0.5], [0.0, 0.0], [0.0, 0.0]]


def test_a_two_step_tiny_rubric_run_trains_on_the_criteria_components(tmp_path, tiny_policy_path):
    overrides = ["trainer.total_steps=2"]
    overrides += ["algorithm.component_norm=gdpo", "logging.save_samples=true", "reward.guard.on_canary=off"]
    run_dir = start_run(load_profile("tiny-rubric", [*SMALL_RUN, *overrides]), tmp_path / "rubric")
    assert train(run_dir).last_step == 2
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] >= 1]
    samples_seen = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["reward/failures"] == 0 and row["reward/component_errors"] == 0
        step = [s for s in samples_seen if s["step"] == row["step"]]
        judged = [s for s in step if not s["reward_extra_info"].get("reward_cached")]
        assert row["reward/model_calls"] == 2 * len(judged)  # every sample judged (not from the cache): K=2 calls
        for s in step:
            parts = s["reward_extra_info"]["reward_components"]
            assert parts["correct_half"] == parts["correct"] / 2
            assert s["score"] == pytest.approx(parts["correct"] + 0.2 * parts["correct_half"])
        assert row["critic/score/mean"] == pytest.approx(
            row["reward/component/correct/mean"] + 0.2 * row["reward/component/correct_half/mean"]
        )
        assert "actor/pg_loss" in row
