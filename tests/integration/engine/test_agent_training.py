"""A training step on tiny-rule in every scheduling mode with rollout.agent on: the tool runs, its tokens reach the batch with mask 0."""

from __future__ import annotations

import json

import pytest

import rlrm.engine.actor.batch as batch_module
from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train
from rlrm.inference.base import Completion
from rlrm.inference.hf import HFRolloutEngine

SMALL = [
    "data.train_batch_size=2",
    "actor.mini_batch_size=2",
    "actor.micro_batch_size=4",
    "rollout.n=2",
    "rollout.max_new_tokens=48",
    "data.val_size=2",
    "trainer.val_before_train=false",
    "trainer.total_steps=1",
    "trainer.num_threads=1",
    "logging.console=none",
    "rollout.agent.enabled=true",
    "rollout.agent.max_turns=2",
]
CALL = "<call>calculator 2+2</call>"


def force_first_turn(monkeypatch, engine_class, tokenizer):
    """The tiny policy never writes a call by itself: the first turn of every trajectory becomes CALL + " 7",
    written past the stop hint (so the loop's tail cut runs too); later turns are really sampled."""
    real_generate = engine_class.generate

    async def first_turn_calls(self, prompt_ids, sampling):
        if "<call>" not in tokenizer.decode(prompt_ids):
            ids = tokenizer.encode(CALL + " 7", add_special_tokens=False)
            return Completion(list(prompt_ids), ids, [-1.0] * len(ids), "length", policy_version=self.version)
        return await real_generate(self, prompt_ids, sampling)

    monkeypatch.setattr(engine_class, "generate", first_turn_calls)


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


def test_reward_samples_carry_the_trajectory_in_extra_info(tiny_policy_path):
    from transformers import AutoTokenizer

    from rlrm.engine.data.example import Example
    from rlrm.engine.scheduling.requests import reward_samples

    tok = AutoTokenizer.from_pretrained(tiny_policy_path)
    example = Example("s/0", [{"role": "user", "content": "2+2?"}], "4", "synthetic", {"split": "train"})
    agent = {"extra_info": {"num_turns": 4, "tool_calls": [{"name": "calculator", "arguments": "2+2", "result": "4"}]}}
    traj = Completion([1], [30, 31], [-1.0, 0.0], "stop", meta={"agent": agent}, loss_mask=[1, 0])
    plain = Completion([1], [30], [-1.0], "stop")
    with_agent, without = reward_samples(tok, [example], [traj, plain], n=2)
    assert with_agent.extra_info == {"split": "train", **agent["extra_info"]}
    assert without.extra_info == {"split": "train"}
    assert example.extra_info == {"split": "train"}  # the example's own dict is never written into


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


def test_engine_log_probs_of_later_turns_match_the_actors_scoring_of_the_trajectory(tiny_policy_path, tokenizer):
    # each later turn is generated from (prompt + earlier turns + observation) in its own request; the actor
    # scores the whole trajectory in one pass: the log-probs must agree, or PPO ratios of later turns are wrong
    import asyncio
    import copy

    from rlrm.engine.actor.batch import collate
    from rlrm.engine.actor.logprobs import response_log_probs
    from rlrm.engine.agent.engine import AgentEngine
    from rlrm.engine.agent.loop import AgentSettings
    from rlrm.engine.agent.tools import build_tools
    from rlrm.inference.base import SamplingParams
    from rlrm.inference.loading import eos_token_ids, load_causal_lm

    policy = load_causal_lm(str(tiny_policy_path), "float32", "cpu")
    inner = HFRolloutEngine(copy.deepcopy(policy), eos_token_ids=eos_token_ids(tokenizer, policy), pad_token_id=0)
    with pytest.MonkeyPatch.context() as mp:
        force_first_turn(mp, HFRolloutEngine, tokenizer)
        settings = AgentSettings(tools=build_tools(["calculator"]), max_turns=3, max_response_tokens=60)
        engine = AgentEngine(inner, tokenizer, settings)
        prompts = [tokenizer.encode(q, add_special_tokens=False) for q in ("What is 2+2?", "Add 2 and 2.")]

        async def go():
            try:
                return await asyncio.gather(
                    *(engine.generate(p, SamplingParams(seed=i)) for i, p in enumerate(prompts))
                )
            finally:
                await inner.close()

        trajectories = asyncio.run(go())
    batch = collate(trajectories, tokenizer.pad_token_id)
    actor_lp = response_log_probs(policy, batch, 1.0, 8)[0].detach()
    call_obs = len(tokenizer.encode(CALL + "<obs>4</obs>", add_special_tokens=False))
    later = batch.response_mask.clone()
    later[:, :call_obs] = 0  # the forced first turn has made-up log-probs; everything after is sampled
    assert later.sum() > 0
    gap = ((actor_lp - batch.rollout_log_prob).abs() * later).max().item()
    assert gap < 1e-4, gap
