"""Per-step audit numbers of the reward (rlrm/engine/rewards/agreement.py): rule agreement and concentration."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("mode", ["sync", "stream", "pipeline", "one-step-off", "fully-async"])
def test_every_mode_writes_the_agreement_of_its_samples(tmp_path, tiny_policy_path, mode):
    """The row's agreement is the one recomputed from samples.jsonl (the step's samples, their scores and truths)."""
    import json
    from pathlib import Path

    from rlrm.config.loader import load_profile
    from rlrm.engine.metrics.metrics_file import read_metrics
    from rlrm.engine.rewards import gsm8k
    from rlrm.engine.trainer import start_run, train

    length_reward = Path(__file__).resolve().parents[2] / "fixtures" / "length_reward.py"
    profile = load_profile(
        "tiny-rule",
        [
            "data.train_batch_size=4",
            "actor.mini_batch_size=4",
            "actor.micro_batch_size=8",
            "rollout.n=4",
            "rollout.max_new_tokens=12",
            "trainer.val_every=0",
            "trainer.val_before_train=false",
            "trainer.save_every=0",
            "trainer.num_threads=1",
            "logging.console=none",
            "logging.save_samples=true",
            f"trainer.mode={mode}",
            "trainer.total_steps=2",
            "reward.kind=custom",
            f"reward.custom.path={length_reward}",
            "reward.agreement_threshold=0.3",  # ~18 characters: the tiny policy's answers fall on both sides
        ],
    )
    run_dir = start_run(profile, tmp_path / mode)
    train(run_dir)
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    for row in read_metrics(run_dir / "metrics.jsonl"):
        mine = [s for s in samples if s["step"] == row["step"]]
        agree = [(s["score"] >= 0.3) == (gsm8k.extract_solution(s["response"]) == s["ground_truth"]) for s in mine]
        assert row["reward/rule_agreement_samples"] == len(mine) == 16
        assert row["reward/rule_agreement"] == pytest.approx(sum(agree) / len(agree))
