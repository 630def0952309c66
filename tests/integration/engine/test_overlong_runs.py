"""reward.overlong: verl's soft overlong penalty (DAPO), added once by the reward loop to any reward kind's score,
never to a failed sample, reported as reward/overlong_penalty and reward/overlong_frac, and kept per sample."""

from __future__ import annotations

import asyncio
import json

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.rewards import gsm8k
from rlrm.engine.rewards.factory import build_reward_fn
from rlrm.engine.rewards.loop import RewardLoop
from tests.unit.engine.rewards.test_overlong import L, overlong_cfg, sample


def test_shaping_composes_with_a_custom_reward(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return 0.25\n")
    cfg = overlong_cfg(kind="custom", custom={"path": str(path)})
    loop = RewardLoop(build_reward_fn(cfg), cfg, max_response_len=L)
    result = asyncio.run(loop.score(sample(0, 18)))
    assert result.score == pytest.approx(0.25 - 0.5) and result.extra["overlong_penalty"] == -0.5


def test_train_run_reports_the_penalty_per_step_and_per_sample(tmp_path, tiny_policy_path):
    from rlrm.engine.trainer import start_run, train

    profile = load_profile(
        "tiny-rule",
        [
            "trainer.total_steps=2",
            "trainer.val_every=0",
            "trainer.save_every=0",
            "trainer.num_threads=2",
            "data.train_batch_size=8",
            "actor.mini_batch_size=8",
            "rollout.n=4",
            "logging.console=none",
            "logging.save_samples=true",
            # the tiny policy answers in ~8-12 tokens of the 20: a buffer of 14 penalises most of them
            "reward.overlong.buffer_len=14",
            "reward.overlong.penalty_factor=0.5",
        ],
    )
    run_dir = start_run(profile, tmp_path / "run")
    train(run_dir)
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if "reward/overlong_penalty" in r]
    assert len(rows) == 2
    lines = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == 2 * 8 * 4
    for step in (1, 2):
        of_step = [x for x in lines if x["step"] == step]
        penalties = [x["reward_extra_info"]["overlong_penalty"] for x in of_step]
        row = next(r for r in rows if r["step"] == step)
        assert row["reward/overlong_penalty"] == pytest.approx(sum(penalties) / len(penalties))
        assert row["reward/overlong_frac"] == pytest.approx(sum(p < 0 for p in penalties) / len(penalties))
        for x in of_step:  # the score is the rule's plus the penalty
            rule = gsm8k.compute_score(x["response"], x["ground_truth"])
            assert x["score"] == pytest.approx(rule + x["reward_extra_info"]["overlong_penalty"])
    assert any(r["reward/overlong_frac"] > 0 for r in rows), "no response was long enough: the run measures nothing"


def test_shaping_composes_with_a_genrm_judge(monkeypatch):
    # a judge behind the stand-in OpenAI-compatible API (tests/fixtures): its verdict, then the penalty, once
    import sys
    from pathlib import Path

    from rlrm.engine.reward_service import RewardService

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
    from standin_openai_api import StandinOpenAIAPI

    monkeypatch.setenv("STANDIN_KEY", "sk-standin-overlong")
    template = "Problem: {question}\nAnswer: {response}\nReference answer: {reference}\nSay Score: 10 or Score: 0."
    with StandinOpenAIAPI("sk-standin-overlong", rpm=6000) as api:
        cfg = overlong_cfg(
            kind="genrm",
            server={"model": api.model, "addresses": [api.base_url], "api_key_env": "STANDIN_KEY"},
            genrm={"template": template, "max_tokens": 8},
        )

        async def scenario():
            service = RewardService(cfg, max_response_len=L)
            await service.start()
            try:
                return await service.loop.score_all([sample(0, 19), sample(1, 19, "#### 4")])
            finally:
                await service.close()

        right, wrong = asyncio.run(scenario())
    assert right.score == pytest.approx(1.0 - 0.75) and wrong.score == pytest.approx(0.0 - 0.75)
    assert right.extra["overlong_penalty"] == -0.75 and right.extra["judge_completion_tokens"] > 0
