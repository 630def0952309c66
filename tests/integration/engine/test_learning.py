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


GENRM_SEEDS_STEPS = 40


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tiny_genrm_learns_in_every_seed_without_fooling_its_judge(tmp_path, tiny_policy_path, seed):
    # The README's first command, as shipped (40 steps, the recipe-5 judge, guard and canaries on), per seed: the
    # held-out accuracy (the rule's) must rise, and the judge must keep agreeing with the rule while it does. With the
    # recipe-3 judge seed 0 was stopped by the guard at step 26, and the recipe-4 judge at seed 4 at step 34.
    profile = load_profile(
        "tiny-genrm",
        [
            f"trainer.total_steps={GENRM_SEEDS_STEPS}",
            f"trainer.seed={seed}",
            "trainer.save_every=0",
            "trainer.num_threads=2",
            "logging.console=none",
        ],
    )
    run_dir = start_run(profile, tmp_path / f"tiny-genrm-{seed}")
    result = train(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert not result.stopped, f"seed {seed}: {result.stopped}"
    assert result.last_step == GENRM_SEEDS_STEPS
    accuracy = [r["val/accuracy"] for r in rows if "val/accuracy" in r]
    # 2026-11-27, seeds 0-4: gains 0.117-0.195 on 128 held-out problems; +0.08 is ~10 of them
    assert accuracy[-1] >= accuracy[0] + 0.08, f"seed {seed}: held-out accuracy {accuracy[0]:.3f} -> {accuracy[-1]:.3f}"
    agreement = [r["reward/rule_agreement"] for r in rows if "reward/rule_agreement" in r]
    assert agreement and min(agreement) >= 0.95, f"seed {seed}: the judge left the rule (lowest {min(agreement):.3f})"
    assert not any(r.get("guard/divergence") for r in rows), f"seed {seed}: the guard saw the reward being gamed"
    print(
        f"tiny-genrm seed {seed}: val/accuracy {accuracy[0]:.3f} -> {accuracy[-1]:.3f}, lowest rule agreement {min(agreement):.3f}"
    )


FAPO_STEPS = 20


@pytest.mark.slow
def test_tiny_fapo_learns_and_its_rule_spares_judge_calls(tmp_path, tiny_policy_path):
    # A custom FAPO-style reward (examples/rewards/fapo_judge.py) calling the tiny judge through the address rlrm
    # hands it: the rule first, the judge only for rule-correct answers.
    profile = load_profile(
        "tiny-fapo",
        [
            f"trainer.total_steps={FAPO_STEPS}",
            f"trainer.val_every={FAPO_STEPS}",
            "trainer.save_every=0",
            "trainer.num_threads=2",
            "logging.console=none",
            "logging.save_samples=true",
        ],
    )
    run_dir = start_run(profile, tmp_path / "tiny-fapo")
    result = train(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert result.last_step == FAPO_STEPS
    before, after = rows[0]["val/accuracy"], rows[-1]["val/accuracy"]
    assert after >= before + 0.06, f"tiny-fapo: held-out accuracy {before:.3f} -> {after:.3f}"
    rewards = [r["critic/score/mean"] for r in rows if "critic/score/mean" in r]
    third = len(rewards) // 3
    assert sum(rewards[-third:]) / third > sum(rewards[:third]) / third, "the FAPO reward did not rise"
    steps = [r for r in rows if "reward/samples" in r]
    assert sum(r["reward/failures"] for r in steps) == 0
    # one judge call per rule-correct sample, none for the others: the calls the rule saved
    import json

    lines = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    judged = sum(x["reward_extra_info"]["judged"] for x in lines)
    calls, samples = sum(r["reward/model_calls"] for r in steps), sum(r["reward/samples"] for r in steps)
    assert calls == judged and len(lines) == samples
    assert 0 < calls < samples, f"{calls} judge calls for {samples} samples"
    print(f"tiny-fapo: val/accuracy {before:.3f} -> {after:.3f}; {calls} judge calls for {samples} samples")
