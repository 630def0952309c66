"""The reward roles on the real vLLM, launched by rlrm's fleet from profile keys alone (`pytest -m vllm`; CI runs
them through .ci/run). One judge for the whole module and the session's DisRM (conftest.py; each takes 20-80 s to
start).
"""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest
from vllm_fleets import EAGER, LoopFleets, disrm_config  # tests/integration/launch/on_vllm/vllm_fleets.py

from rlrm.config.reward import RewardServerConfig
from rlrm.launch.fleet.health import check_servers
from rlrm.launch.fleet.process import ServerStartError

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def fleets():
    with LoopFleets() as fleets:
        yield fleets


@pytest.fixture(scope="module")
def judge(fleets, tiny_policy_path):
    """A judge on vLLM from `reward.server.backend: vllm`, served under the profile's model name (`tiny:policy`:
    the chat contract does not need a trained judge; test_vllm_runs.py runs the trained one)."""
    cfg = RewardServerConfig(
        backend="vllm", model="tiny:policy", router="client", start_timeout_s=600, extra_args=EAGER
    )
    return fleets.start(cfg, "genrm")


@pytest.fixture(scope="module")
def embedded_disrm(fleets, vllm_disrm_path):
    return fleets.start(disrm_config("embedded", vllm_disrm_path), "disrm")


def test_judge_serves_chat_under_the_profiles_model_name(judge):
    url = judge.replica_urls[0]
    assert [m["id"] for m in httpx.get(url + "/v1/models").json()["data"]] == ["tiny:policy"]
    body = {
        "model": "tiny:policy",
        "messages": [{"role": "user", "content": "Question: 3 + 4\nAnswer: 7\n#### 7"}],
        "max_tokens": 24,
        "temperature": 0,
    }
    out = httpx.post(url + "/v1/chat/completions", json=body, timeout=120).json()
    assert isinstance(out["choices"][0]["message"]["content"], str) and out["usage"]["completion_tokens"] > 0
    argv = judge.pool.servers[0].argv
    assert "--no-enable-chunked-prefill" in argv and "--convert" not in argv


def test_many_concurrent_seeded_requests_with_long_prompts_all_succeed(judge):
    # Per-request seeds with 60-80-token prompts killed vLLM's CPU engine core when a prefill was split
    # ("CPU Generator does not use offset"); the launched argv keeps prefills whole.
    url = judge.replica_urls[0]

    async def scenario():
        async with httpx.AsyncClient(timeout=300) as client:

            async def one(i):
                rng = random.Random(i)
                prompt = [rng.randrange(3, 400) for _ in range(rng.randrange(60, 81))]
                body = {"model": "tiny:policy", "prompt": prompt, "max_tokens": 8, "seed": i, "temperature": 1.0}
                return (await client.post(url + "/v1/completions", json=body)).status_code

            return await asyncio.gather(*(one(i) for i in range(256)))

    codes = asyncio.run(scenario())
    assert codes == [200] * 256 and judge.pool.servers[0].alive()


def test_disrm_classify_matches_the_embedded_server(vllm_disrm, embedded_disrm):
    rng = random.Random(0)
    inputs = [[rng.randrange(3, 400) for _ in range(rng.randrange(8, 60))] for _ in range(16)]

    def scores(fleet):
        out = httpx.post(
            fleet.replica_urls[0] + "/classify",
            json={"model": "rm", "input": inputs, "use_activation": False},
            timeout=120,
        )
        assert out.status_code == 200, out.text
        return [d["probs"][0] for d in out.json()["data"]]

    real, ours = scores(vllm_disrm), scores(embedded_disrm)
    assert len(real) == 16 and max(abs(a - b) for a, b in zip(real, ours)) < 1e-4
    assert max(real) - min(real) > 1e-3  # the inputs are told apart: not a constant
    argv = vllm_disrm.pool.servers[0].argv
    assert argv[argv.index("--convert") + 1] == "classify"


def test_a_wrong_served_model_name_is_one_line_with_both_names(judge, fleets):
    cfg = RewardServerConfig(model="tiny:policy", addresses=judge.replica_urls, served_model_name="judge-v2")
    with pytest.raises(ServerStartError, match=r"serves 'tiny:policy', not reward.server.served_model_name 'judge-v2'"):
        fleets.start(cfg, "genrm")
    right = RewardServerConfig(model="some/path", addresses=judge.replica_urls, served_model_name="tiny:policy")
    fleets.start(right, "genrm")  # the name it serves: passes, and the requests carry it
    assert right.request_model == "tiny:policy"


def test_a_server_without_classify_cannot_be_the_disrm(judge):
    # a vLLM started for generation (no --runner pooling --convert classify) given as the DisRM's address
    with pytest.raises(ServerStartError, match=r"POST /classify answered 4\d\d.*--convert classify"):
        asyncio.run(check_servers(judge.replica_urls, "disrm", None, "tiny:policy", 60))
