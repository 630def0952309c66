"""A training step on tiny-rule in every scheduling mode with rollout.agent on: the tool runs, its tokens reach the batch with mask 0."""

from __future__ import annotations

import json

import pytest
from small_run import SMALL_RUN

import rlrm.engine.actor.batch as batch_module
from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train
from rlrm.inference.hf import HFRolloutEngine
from tests.unit.engine.agent.test_agent_trajectories import CALL, force_first_turn

SMALL = [
    *SMALL_RUN,
    "data.train_batch_size=2",
    "actor.mini_batch_size=2",
    "rollout.max_new_tokens=48",  # a tool call, its observation and an answer after it
    "trainer.total_steps=1",
    "rollout.agent.enabled=true",
    "rollout.agent.max_turns=2",
]


@pytest.fixture(scope="module")
def tokenizer(tiny_policy_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_policy_path)


@pytest.mark.parametrize("mode", ["sync", "stream", "pipeline", "one-step-off", "fully-async"])
def test_a_step_trains_generated_tokens_only(tmp_path, tokenizer, monkeypatch, mode):
    force_first_turn(monkeypatch, HFRolloutEngine, tokenizer)
    batches = []
    real_collate = batch_module.collate

    def spy(completions, pad_token_id):
        batch = real_collate(completions, pad_token_id)
        batches.append(batch)
        return batch

    monkeypatch.setattr(batch_module, "collate", spy)
    run_dir = start_run(load_profile("tiny-rule", [*SMALL, f"trainer.mode={mode}"]), tmp_path / "run")
    train(run_dir)

    batch = batches[0]
    obs = tokenizer.encode("<obs>4</obs>", add_special_tokens=False)
    call = tokenizer.encode(CALL, add_special_tokens=False)
    p = batch.prompt_length
    for row in range(len(batch)):
        response = batch.input_ids[row, p:].tolist()
        assert response[: len(call) + len(obs)] == call + obs  # " 7" past the tag was cut
        mask = batch.response_mask[row].tolist()
        attended = batch.attention_mask[row, p:].tolist()
        assert mask[: len(call)] == [1.0] * len(call)
        assert mask[len(call) : len(call) + len(obs)] == [0.0] * len(obs)  # observation: never trained on
        assert attended[len(call) : len(call) + len(obs)] == [1] * len(obs)  # ... but attended to
        assert batch.rollout_log_prob[row, len(call) : len(call) + len(obs)].abs().sum() == 0
    row = read_metrics(run_dir / "metrics.jsonl")[0]
    if mode != "sync":  # the other modes may already be generating the next batch when the row is written
        return
    assert row["agent/tool_calls"] == pytest.approx(4.0)  # 2 prompts x 2 samples, one call each
    assert row["agent/tool_errors"] == 0.0 and row["agent/turns_mean"] == pytest.approx(2.0)
    assert row["agent/mixed_version_ratio"] == 0.0  # sync: the weights never change during a step


def test_served_replica_runs_the_same_trajectories_as_the_hf_engine(tmp_path, tokenizer, monkeypatch):
    # the loop sends token ids (observations included) over /generate: an embedded replica must sample what the
    # in-process engine samples, token for token, and the weights must train alike
    from rlrm.launch.client.rollout_engine import ServerRolloutEngine

    force_first_turn(monkeypatch, HFRolloutEngine, tokenizer)
    force_first_turn(monkeypatch, ServerRolloutEngine, tokenizer)
    common = [*SMALL, "trainer.total_steps=2", "logging.save_samples=true", "trainer.save_every=0"]
    served = ["rollout.backend=server", "rollout.server.router=client", "rollout.server.threads=1"]
    runs = {}
    for name, extra in (("hf", []), ("served", served)):
        run_dir = start_run(load_profile("tiny-rule", [*common, *extra]), tmp_path / name)
        train(run_dir)
        lines = (run_dir / "samples.jsonl").read_text().splitlines()
        runs[name] = [(r["step"], r["response"]) for r in map(json.loads, lines)]
    assert runs["served"] == runs["hf"]
    assert all("<obs>4</obs>" in response for _, response in runs["hf"])
    assert any(response.split("</obs>", 1)[1].strip() for _, response in runs["hf"])  # sampled after the tool


@pytest.mark.parametrize("mode", ["one-step-off", "fully-async"])
def test_each_row_means_the_trajectories_its_step_trained(tmp_path, tokenizer, monkeypatch, mode):
    # each step trains 2 trajectories of one forced call: turns_mean 2 on every row. They were the engine's since
    # the last row: fully-async's step 1 held three batches' trajectories, and its later rows none
    force_first_turn(monkeypatch, HFRolloutEngine, tokenizer)
    run_dir = start_run(load_profile("tiny-rule", [*SMALL, f"trainer.mode={mode}", "trainer.total_steps=3"]), tmp_path)
    assert train(run_dir).last_step == 3
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [(r["step"], r.get("agent/turns_mean")) for r in rows] == [(1, 2.0), (2, 2.0), (3, 2.0)]
    assert sum(r["agent/tool_calls"] for r in rows) >= 2 * 3  # counted as generated (some ahead of their step)
