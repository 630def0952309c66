"""Multi-turn tool trajectories through a real vLLM policy replica (`pytest -m vllm`), and its prefix cache.

The tiny policy never writes `<call>` by itself, so each request carries a vLLM structured-output regex chosen
from the text so far (a tool setup the test controls; sampling, token ids, log-probs and EOS stay vLLM's own):
a fresh turn must call the calculator and a turn after an observation must answer. The loop's `>` stop hint is
left out of these requests: vLLM 0.32 fails a guided request that a stop token id ends inside its grammar (500,
"grammar rejected tokens [0]"), so the call turn runs to its EOS and the loop cuts it after `</call>` (the path
of a tokenizer whose `>` never fires). The loop (rlrm/engine/agent/loop.py) is the one training uses.
vLLM's /metrics counts the prefix-cache tokens queried and hit: each turn re-submits the whole trajectory, and
the whole 128-token blocks of the earlier turns come back from the cache (automatic prefix caching, on by
default in vLLM 0.32, CPU included; docs/agentic.md quotes the hit ratio).
"""

from __future__ import annotations

import re
import time

import httpx
import pytest

from rlrm.engine.agent.loop import AgentSettings, run_agent
from rlrm.engine.agent.tools import ToolCounts, build_tools
from rlrm.inference.base import SamplingParams
from rlrm.launch.client.wire import VllmWire

pytestmark = pytest.mark.vllm

CALL = r"<call>calculator [1-9][0-9]\+[1-9][0-9]</call>"
ANSWER = r"#### [0-9]{2,3}"
# vLLM on CPU caches whole 128-token KV blocks only (its CPU block size): the prompts are made longer than one,
# and differ from their first token, so that a hit is a trajectory reusing its own earlier turns
PAD = "Use the calculator, then write the answer after ####. " * 4


class GuidedWire(VllmWire):
    """vLLM's wire plus a structured-output regex per request; it keeps what vLLM answered (token ids, finish)."""

    def __init__(self, model_name: str, tokenizer):
        super().__init__(model_name)
        self.tok = tokenizer
        self.answers: list[tuple[list[int], list[int], str]] = []  # (prompt ids, token ids, finish_reason)
        self._prompts: list[list[int]] = []

    def request(self, prompt_ids, sampling, seed):
        body = super().request(prompt_ids, sampling, seed)
        text = self.tok.decode(prompt_ids)
        if text.endswith("</obs>"):
            regex = ANSWER
        else:
            regex = CALL
        body["structured_outputs"] = {"regex": regex}
        body["stop_token_ids"] = [self.tok.eos_token_id]  # no `>` hint: see the module's docstring
        self._prompts.append(list(prompt_ids))
        return body

    def parse(self, body):
        choice = body["choices"][0]
        self.answers.append((self._prompts[-1], [int(t) for t in choice["token_ids"]], choice["finish_reason"]))
        return super().parse(body)


def _metrics(url: str, key: str | None) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}  # the replica is keyed: every path but /health
    text = httpx.get(url.rstrip("/") + "/metrics", headers=headers, timeout=10).text
    out = {}
    for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
        out[name] = sum(float(m) for m in re.findall(rf"^{re.escape(name)}{{[^}}]*}} (\S+)$", text, re.M))
    return out


def test_tool_trajectories_on_vllm_splice_observations_and_hit_the_prefix_cache(vllm_rollout, tiny_policy_path):
    # the session's replica (conftest.py), still on the policy's own weights; this test's wire for its requests
    from transformers import AutoTokenizer

    engine, loop = vllm_rollout
    tok = AutoTokenizer.from_pretrained(tiny_policy_path)
    wire = GuidedWire(engine.fleet.served_name, tok)
    settings = AgentSettings(tools=build_tools(["calculator"]), max_turns=3, max_response_tokens=120)
    prompts = [
        list(
            tok.apply_chat_template(
                [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
        for q in (f"What is 12+34? {PAD}", f"What is 50+27? {PAD}")
    ]
    counts = ToolCounts()

    async def scenario():
        before = _metrics(engine.fleet.urls[0], engine.api_key)
        trajs = []
        for i, prompt in enumerate(prompts):  # one after the other: the hits are each trajectory's own turns
            sampling = SamplingParams(
                temperature=1.0, max_new_tokens=120, seed=11 + i, stop_token_ids=[tok.eos_token_id]
            )
            trajs.append(await run_agent(engine, prompt, sampling, tok, settings, counts))
        return trajs, before, _metrics(engine.fleet.urls[0], engine.api_key), engine.version

    shared_wire, engine.wire = engine.wire, wire
    started = time.perf_counter()
    try:
        trajs, before, after, version = loop.run(scenario())
    finally:
        engine.wire = shared_wire
    print(f"vLLM agent run ({len(trajs)} trajectories): {time.perf_counter() - started:.1f} s")
    assert counts.take()["agent/tool_calls"] == 2.0
    answers = iter(wire.answers)
    for prompt, traj in zip(prompts, trajs):
        agent = traj.meta["agent"]
        turns = agent["turns"]
        assert [t["role"] for t in turns] == ["assistant", "tool", "assistant"], turns
        call = re.fullmatch(r"<call>calculator (\d+)\+(\d+)</call>", turns[0]["text"])
        assert call, turns[0]["text"]
        result = str(int(call[1]) + int(call[2]))
        assert turns[1]["text"] == result and agent["extra_info"]["tool_calls"][0]["result"] == result
        # the observation is exactly the tool's result, as tokens, with loss mask 0 and log-prob 0
        obs = tok.encode(f"<obs>{result}</obs>", add_special_tokens=False)
        a = turns[0]["tokens"]
        assert traj.token_ids[a : a + len(obs)] == obs
        assert traj.loss_mask == [1] * a + [0] * len(obs) + [1] * (len(traj.token_ids) - a - len(obs))
        assert traj.log_probs[a : a + len(obs)] == [0.0] * len(obs)
        assert all(lp <= 0 for lp in traj.log_probs) and len(traj.log_probs) == len(traj.token_ids)
        assert re.fullmatch(ANSWER, turns[2]["text"]), turns[2]["text"]
        assert traj.finish_reason == "stop" and traj.token_ids[-1] == tok.eos_token_id
        # each request is the prompt + the trajectory so far, and the trajectory holds the ids vLLM sampled: the
        # call turn's up to `</call>` (the EOS vLLM drew after it is dropped), then the answer's
        (sent1, ids1, finish1), (sent2, ids2, finish2) = next(answers), next(answers)
        assert sent1 == prompt and ids1 == traj.token_ids[:a] + [tok.eos_token_id] and finish1 == "stop"
        assert sent2 == prompt + traj.token_ids[: a + len(obs)] and ids2 == traj.token_ids[a + len(obs) :]
        assert finish2 == "stop" and traj.prompt_ids == prompt
        requests = len(agent["policy_versions"])
        assert requests == 2
        assert agent["policy_versions"] == [version] * requests and traj.policy_version == version
    assert next(answers, None) is None
    queried = after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]
    hits = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    print(f"vLLM prefix cache over the trajectories: {hits:.0f}/{queried:.0f} prompt tokens hit ({hits / queried:.2f})")
    assert queried > 0 and hits > 0  # the later turns' requests reuse the earlier turns' KV blocks


@pytest.mark.slow  # launches its own replica: ~75 s on 2 cores
def test_rlrm_train_with_the_agent_loop_on_vllm(tmp_path):
    """`rlrm train --profile tiny-rule --set rollout.agent.enabled=true` on a launched vLLM replica, end to end.
    The tiny policy never writes `<call>` (its trajectories are one turn: the test above forces the calls); this
    checks the plumbing a user's command goes through: the loop's requests, its metrics, the recompute."""
    from typer.testing import CliRunner

    from rlrm.cli.main import app
    from rlrm.engine.metrics.metrics_file import read_metrics

    out = tmp_path / "run"
    args = ["train", "--profile", "tiny-rule", "--steps", "2", "--out", str(out)]
    for setting in (
        "rollout.backend=server",
        "rollout.server.backend=vllm",
        "rollout.server.start_timeout_s=600",
        "rollout.agent.enabled=true",
        "data.train_batch_size=8",
        "actor.mini_batch_size=8",
        "rollout.n=4",
        "trainer.val_every=0",
        "trainer.save_every=0",
        "logging.console=none",
    ):
        args += ["--set", setting]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "agent/turns_mean" in r]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["agent/turns_mean"] >= 1.0 and row["agent/mixed_version_ratio"] == 0.0
        # the actor's recompute of what the loop handed back from vLLM: the same tokens, the same log-probs
        assert row["rollout/log_prob_diff_max"] < 1e-3
