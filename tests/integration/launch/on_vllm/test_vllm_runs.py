"""Whole runs with the reward model on the real vLLM, launched from one profile key (`pytest -m vllm`):
`rlrm train --profile tiny-genrm --set reward.server.backend=vllm` and `rlrm parity disrm` with the reward-loop
side on vLLM (verl's legacy-vs-reward-loop DisRM comparison on the real engine)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner
from vllm_fleets import policy_sized_disrm  # tests/integration/launch/on_vllm/vllm_fleets.py

from rlrm.cli.main import app
from rlrm.engine.metrics.metrics_file import read_metrics

pytestmark = pytest.mark.vllm


def test_tiny_genrm_trains_with_its_judge_on_vllm(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--profile", "tiny-genrm", "--steps", "3", "--out", str(out), "--console", "none"]
    args += ["--set", "reward.server.backend=vllm", "--set", "reward.server.start_timeout_s=600"]
    args += ["--set", "data.train_batch_size=8", "--set", "actor.mini_batch_size=8", "--set", "rollout.n=4"]
    args += ["--set", "trainer.val_every=0"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = [r for r in read_metrics(out / "metrics.jsonl") if r["step"] > 0 and "reward/rule_agreement" in r]
    assert len(rows) == 3
    # the judge's verdicts agree with the rule reward: they came from the judge (a server answering anything
    # else, or nothing, would leave them unparsed and near chance)
    assert all(r["reward/judge_completion_tokens"] > 0 for r in rows)
    assert sum(r["reward/rule_agreement"] for r in rows) / 3 >= 0.85, rows


def test_parity_disrm_with_the_reward_loop_on_vllm(tmp_path, tiny_policy_path):
    out = tmp_path / "parity"
    model = policy_sized_disrm(tmp_path / "disrm", tiny_policy_path)
    args = ["parity", "disrm", "--profile", "tiny-disrm", "--model", str(model), "--samples", "8"]
    args += ["--threads", "1", "--out", str(out)]
    args += ["--set", "reward.server.backend=vllm", "--set", "reward.server.start_timeout_s=600"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output
    summary = json.loads((out / "summary.json").read_text())
    print("parity on vLLM:", json.dumps(summary)[:2000])
