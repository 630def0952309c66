"""A DisRM served by SGLang (`reward.server.backend: sglang`, launched with --is-embedding) is probed and scored in
SGLang's own /classify shape: an EmbeddingReqInput (`input_ids`) answered {"embedding": [...]}, against a STAND-IN
of it (tests/integration/launch/standin_engine.py --kind sglang).

Before: rlrm sent vLLM's body ({"model", "input", "use_activation"}) and read vLLM's answer (data[-1].probs[-1]):
SGLang answered 400 "Either text or input_ids should be provided", so every SGLang DisRM failed its start check,
and would have failed every score."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.disrm import make_disrm_reward
from rlrm.engine.rewards.invariance import InvarianceSettings, check_invariance
from rlrm.launch.client.balancer import ReplicaBalancer
from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.health import check_servers
from rlrm.launch.fleet.process import ServerProcess, ServerStartError

STANDIN = str(Path(__file__).with_name("standin_engine.py"))


def _standin(kind: str, log: Path) -> ServerProcess:
    return ServerProcess.movable(
        [sys.executable, STANDIN, "--kind", kind, "--port", str(free_port()), "--log", str(log)]
    )


def _standin_score(ids: list[int]) -> float:
    """The stand-in's raw logit for `ids` (standin_engine.py's /classify)."""
    return (sum(ids) * 31 + len(ids)) % 97 / 8.0 - 6.0


class _Tokenizer:
    """A chat template and tokenizer of the reward model, enough for the DisRM client: one id per character."""

    def apply_chat_template(self, messages, tokenize=False):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages)

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) % 500 for c in text]}


@pytest.fixture(scope="module")
def sglang_rm(tmp_path_factory):
    log = tmp_path_factory.mktemp("rm") / "calls.jsonl"
    with _standin("sglang", log) as server:
        yield server, log


def test_an_sglang_disrm_passes_its_start_check_with_sglangs_classify(sglang_rm):
    server, log = sglang_rm
    asyncio.run(check_servers([server.url], "disrm", None, "rm", timeout_s=30, backend="sglang"))
    bodies = [json.loads(line)["body"] for line in log.read_text().splitlines()]
    assert {"text": "ok"} in bodies and not any("input" in b for b in bodies)  # SGLang's EmbeddingReqInput only


def test_a_server_without_sglangs_classify_is_told_to_serve_it_with_is_embedding(tmp_path):
    with _standin("vllm", tmp_path / "calls.jsonl") as server:  # no /classify at all: 404
        with pytest.raises(ServerStartError, match=r"POST /classify answered 404.*SGLang: --is-embedding"):
            asyncio.run(check_servers([server.url], "disrm", None, "rm", timeout_s=30, backend="sglang"))


def test_an_sglang_disrm_scores_the_raw_logit_and_its_invariance_check_runs(sglang_rm):
    server, log = sglang_rm
    cfg = RewardConfig(kind="disrm", server={"model": "rm", "addresses": [server.url], "backend": "sglang"})
    tokenizer = _Tokenizer()
    sample = RewardSample(
        uid="u0",
        index=0,
        data_source="d",
        prompt=[{"role": "user", "content": "2+2?"}],
        solution_str="4",
        ground_truth="4",
    )
    ids = tokenizer(tokenizer.apply_chat_template(sample.prompt + [{"role": "assistant", "content": "4"}]))["input_ids"]

    async def scenario():
        balancer = ReplicaBalancer([server.url])
        try:
            result = await make_disrm_reward(cfg, balancer, tokenizer)(sample)
            batch = [ids, ids[:-1], ids[:5], [7, 8, 9]]
            report = await check_invariance(
                balancer, "rm", batch, ["a", "a", "b", "b"], InvarianceSettings(max_batch=4), 10.0, backend="sglang"
            )
            return result, report, batch
        finally:
            await balancer.close()

    result, report, batch = asyncio.run(scenario())
    assert result.score == pytest.approx(_standin_score(ids)) and result.extra["disrm_score"] == result.score
    sent = [json.loads(line)["body"] for line in log.read_text().splitlines()]
    assert {"input_ids": ids} in sent  # the scored request: SGLang's shape, the ids as rendered
    assert report["passed"] and report["reference_scores"] == pytest.approx([_standin_score(s) for s in batch])
    assert {"input_ids": batch} in sent  # a batch of 4 in one request (SGLang's list of lists)
