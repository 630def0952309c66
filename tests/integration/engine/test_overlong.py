"""reward.overlong: verl's soft overlong penalty (DAPO), added once by the reward loop to any reward kind's score,
never to a failed sample, reported as reward/overlong_penalty and reward/overlong_frac, and kept per sample."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from rlrm.config.loader import load_profile
from rlrm.config.reward import RewardConfig
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.rewards import gsm8k
from rlrm.engine.rewards.base import RewardResult, RewardSample
from rlrm.engine.rewards.factory import build_reward_fn
from rlrm.engine.rewards.loop import RewardLoop
from rlrm.engine.rewards.overlong import overlong_penalty
from rlrm.errors import ConfigError

L = 20  # max response length (rollout.max_new_tokens)
B = 4  # buffer_len: the penalty starts past L - B = 16 tokens


@pytest.mark.parametrize(
    ("length", "factor", "expected"),
    [
        (10, 1.0, 0.0),  # well inside: min(-(10-16)/4, 0) = min(1.5, 0) = 0
        (16, 1.0, 0.0),  # exactly expected_len: exceed 0 -> 0 (not -0.0)
        (17, 1.0, -0.25),  # 1 token past: -1/4
        (18, 1.0, -0.5),  # -2/4
        (19, 2.0, -1.5),  # -3/4 * 2
        (20, 1.0, -1.0),  # exactly L: -4/4 = -penalty_factor
        (20, 0.5, -0.5),  # -4/4 * 0.5
        (20, 0.0, 0.0),  # factor 0: never penalised
    ],
)
def test_penalty_matches_hand_computed_values(length, factor, expected):
    penalty = overlong_penalty(length, L, B, factor)
    assert penalty == pytest.approx(expected, abs=1e-12)
    assert math.copysign(1.0, penalty) == (1.0 if expected == 0 else -1.0)  # 0.0, never -0.0, when not penalised


def sample(i: int, length: int | None, answer: str = "#### 3") -> RewardSample:
    return RewardSample(f"p{i}", i, "synthetic", [{"role": "user", "content": "1+2?"}], answer, "3", {}, length)


def overlong_cfg(**over) -> RewardConfig:
    return RewardConfig.model_validate({"overlong": {"buffer_len": B, "penalty_factor": 1.0}, **over})


def test_loop_shapes_once_and_reports_the_mean_and_share():
    cfg = overlong_cfg()
    loop = RewardLoop(build_reward_fn(cfg), cfg, max_response_len=L)
    batch = [sample(0, 12), sample(1, 18), sample(2, 20), sample(3, 20, "#### 4"), sample(4, None)]
    results = asyncio.run(loop.score_all(batch))
    # rule 1, 1, 1, 0, 1; penalties 0, -0.5, -1, -1 and none for the unknown length
    assert [r.score for r in results] == [1.0, 0.5, 0.0, -1.0, 1.0]
    assert [r.extra.get("overlong_penalty") for r in results] == [0.0, -0.5, -1.0, -1.0, None]
    assert [r.extra.get("overlong") for r in results] == [False, True, True, True, None]
    metrics = loop.take_metrics()
    assert metrics["reward/overlong_penalty"] == pytest.approx(-2.5 / 4)
    assert metrics["reward/overlong_frac"] == pytest.approx(3 / 4)


def test_a_retried_sample_is_shaped_once():
    cfg = overlong_cfg(max_retries=2, backoff_s=0.0)
    tries = []

    async def flaky(s: RewardSample) -> RewardResult:
        from rlrm.call_errors import TransientError

        tries.append(s.index)
        if len(tries) < 3:
            raise TransientError("503")
        return RewardResult(1.0)

    loop = RewardLoop(flaky, cfg, max_response_len=L)
    result = asyncio.run(loop.score(sample(0, 20)))
    assert len(tries) == 3 and result.score == 0.0  # 1 - 1, not 1 - 3


@pytest.mark.parametrize("on_failure", ["default", "drop-group"])
def test_a_failed_sample_stays_failed_and_is_not_shaped(on_failure):
    cfg = overlong_cfg(on_failure=on_failure, default_score=0.0, max_retries=0)

    async def broken(s: RewardSample) -> RewardResult:
        if s.index == 0:
            raise ValueError("no answer")
        return RewardResult(1.0)

    loop = RewardLoop(broken, cfg, max_response_len=L)
    failed, scored = asyncio.run(loop.score_all([sample(0, 20), sample(1, 20)]))
    if on_failure == "default":
        assert failed.score == 0.0 and failed.extra["reward_failed"]  # the default score, not 0 - 1
        assert "overlong_penalty" not in failed.extra
    else:
        assert failed is None
    assert scored.score == 0.0 and scored.extra["overlong_penalty"] == -1.0
    metrics = loop.take_metrics()
    assert metrics["reward/failures"] == 1
    # the failed sample is left out of the mean and the share: one shaped sample, penalised by 1
    assert metrics["reward/overlong_penalty"] == -1.0 and metrics["reward/overlong_frac"] == 1.0


def test_shaping_composes_with_a_custom_reward(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return 0.25\n")
    cfg = overlong_cfg(kind="custom", custom={"path": str(path)})
    loop = RewardLoop(build_reward_fn(cfg), cfg, max_response_len=L)
    result = asyncio.run(loop.score(sample(0, 18)))
    assert result.score == pytest.approx(0.25 - 0.5) and result.extra["overlong_penalty"] == -0.5


def test_no_overlong_section_no_shaping_and_no_metric():
    cfg = RewardConfig()
    loop = RewardLoop(build_reward_fn(cfg), cfg, max_response_len=L)
    assert asyncio.run(loop.score(sample(0, 20))).score == 1.0
    assert "reward/overlong_penalty" not in loop.take_metrics()


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("reward.overlong.buffer_len=20", "reward.overlong.buffer_len (20) must be below rollout.max_new_tokens (20)"),
        ("reward.overlong.buffer_len=0", "reward.overlong.buffer_len: Input should be greater than 0"),
        ("reward.overlong.penalty_factor=-1", "reward.overlong.penalty_factor: Input should be greater than or equal"),
        ("reward.overlong.penalty_factor=nan", "reward.overlong.penalty_factor: Input should be a finite number"),
    ],
)
def test_bad_settings_are_one_clear_line(override, said):
    with pytest.raises(ConfigError) as refused:
        load_profile("tiny-rule", ["reward.overlong.buffer_len=8", override])
    assert said in str(refused.value) and "\n" not in str(refused.value)


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
