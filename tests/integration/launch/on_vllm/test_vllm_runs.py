"""Whole runs with the reward model on the real vLLM (`pytest -m vllm`): `rlrm train --profile tiny-genrm --set
reward.server.backend=vllm` (the judge launched from that one profile key) and `rlrm parity disrm` with the
reward-loop side on the session's vLLM DisRM (verl's legacy-vs-reward-loop DisRM comparison on the real engine)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner
from vllm_fleets import EAGER_REWARD_SERVER  # tests/integration/launch/on_vllm/vllm_fleets.py

from rlrm.cli.main import app
from rlrm.engine.metrics.metrics_file import read_metrics

pytestmark = pytest.mark.vllm


def test_tiny_genrm_trains_with_its_judge_on_vllm(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--profile", "tiny-genrm", "--steps", "3", "--out", str(out), "--console", "none"]
    args += ["--set", "reward.server.backend=vllm", "--set", "reward.server.start_timeout_s=600"]
    args += ["--set", EAGER_REWARD_SERVER]
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


def test_parity_disrm_with_the_reward_loop_on_vllm(tmp_path, vllm_disrm, vllm_disrm_path):
    """The served side is the session's vLLM DisRM, given by address as a user gives a running server (launching
    one from `reward.server.backend: vllm` is test_vllm_reward_roles.py's and the genrm run's above)."""
    out = tmp_path / "parity"
    args = ["parity", "disrm", "--profile", "tiny-disrm", "--model", str(vllm_disrm_path), "--samples", "8"]
    args += ["--threads", "1", "--out", str(out)]
    args += ["--set", "reward.server.backend=vllm", "--set", f"reward.server.addresses={vllm_disrm.replica_urls[0]}"]
    args += ["--set", "reward.server.served_model_name=rm"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output
    summary = json.loads((out / "summary.json").read_text())
    print("parity on vLLM:", json.dumps(summary)[:2000])
