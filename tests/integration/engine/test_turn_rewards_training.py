"""A tiny-rule step with rollout.agent on and a custom reward that returns turn_scores, in an on-policy and an
off-policy mode: the per-turn rewards reach the step, and critic/score is each sample's return."""

from __future__ import annotations

import json

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train
from rlrm.inference.hf import HFRolloutEngine
from tests.integration.engine.test_agent_training import SMALL, force_first_turn

REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info):
    turns = [t for t in extra_info.get("turns", []) if t["role"] == "assistant"]
    return {"score": 1.0, "turn_scores": [0.5 if "tool_call" in t else 0.0 for t in turns] or [0.0]}
"""


@pytest.fixture(scope="module")
def tokenizer(tiny_policy_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_policy_path)


@pytest.mark.parametrize("mode", ["sync", "fully-async"])
def test_turn_scores_reach_the_step_and_critic_score_is_the_return(tmp_path, tokenizer, monkeypatch, mode):
    force_first_turn(monkeypatch, HFRolloutEngine, tokenizer)  # every trajectory: a calculator call, then an answer
    fn = tmp_path / "turn_reward.py"
    fn.write_text(REWARD)
    extra = ["reward.kind=custom", f"reward.custom.path={fn}", "logging.save_samples=true", f"trainer.mode={mode}"]
    run_dir = start_run(load_profile("tiny-rule", [*SMALL, *extra]), tmp_path / "run")
    train(run_dir)
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert samples
    for s in samples:
        assert s["reward_extra_info"]["turn_scores"] == [0.5, 0.0], s
    row = read_metrics(run_dir / "metrics.jsonl")[0]
    assert row["critic/score/mean"] == pytest.approx(1.5) and row["reward/turn_score_errors"] == 0
