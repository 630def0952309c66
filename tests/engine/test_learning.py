"""The learning test: GRPO on `tiny-rule` must raise held-out accuracy clearly above the warm start.

It fails when the maths is broken: with the advantage sign flipped or the loss detached from the
graph, accuracy does not rise (checked by hand once, see the closing note of issue 2).
"""

from __future__ import annotations

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train

LEARNING_STEPS = 20


def test_tiny_rule_learns(tmp_path, tiny_policy_path):
    profile = load_profile(
        "tiny-rule",
        [
            f"trainer.total_steps={LEARNING_STEPS}",
            f"trainer.val_every={LEARNING_STEPS}",
            "trainer.save_every=0",
            "trainer.num_threads=2",
            "logging.console=none",
        ],
    )
    run_dir = start_run(profile, tmp_path / "learn")
    result = train(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    before, after = rows[0]["val/accuracy"], rows[-1]["val/accuracy"]
    assert result.last_step == LEARNING_STEPS
    # 128 held-out problems: +0.08 is ~10 problems, well beyond run-to-run noise of greedy decoding.
    assert after >= before + 0.08, f"held-out accuracy {before:.3f} -> {after:.3f}"
    rewards = [r["critic/score/mean"] for r in rows if "critic/score/mean" in r]
    third = len(rewards) // 3
    assert sum(rewards[-third:]) / third > sum(rewards[:third]) / third


@pytest.mark.slow
@pytest.mark.parametrize(
    ("profile_name", "steps"),
    [
        ("tiny-genrm", 20),  # reward: the tiny judge's verdict, through the SGLang router when installed
        ("tiny-disrm", 30),  # reward: the tiny DisRM's logit over /classify; it never sees the reference
    ],
)
def test_reward_model_profiles_learn(tmp_path, tiny_policy_path, profile_name, steps):
    # The reward comes over HTTP from a served model; the held-out accuracy is still the rule's.
    profile = load_profile(
        profile_name,
        [
            f"trainer.total_steps={steps}",
            f"trainer.val_every={steps}",
            "trainer.save_every=0",
            "trainer.num_threads=2",
            "logging.console=none",
        ],
    )
    run_dir = start_run(profile, tmp_path / profile_name)
    result = train(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert result.last_step == steps
    before, after = rows[0]["val/accuracy"], rows[-1]["val/accuracy"]
    assert after >= before + 0.06, f"{profile_name}: held-out accuracy {before:.3f} -> {after:.3f}"
    rewards = [r["critic/score/mean"] for r in rows if "critic/score/mean" in r]
    third = len(rewards) // 3
    assert sum(rewards[-third:]) / third > sum(rewards[:third]) / third, "the model-scored reward did not rise"
    assert sum(r["reward/failures"] - r["reward/unparsed"] for r in rows if "reward/failures" in r) == 0
