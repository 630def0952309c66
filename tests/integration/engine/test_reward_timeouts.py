"""Each reward timeout does its one job, against a real HTTP judge on a free loopback port: a hosted-style API
(base URL, no /health) that answers its n-th chat request after `delays[n]` seconds.

- reward.server.request_timeout_s cuts one request (a slow answer), while the attempt still has time;
- reward.attempt_timeout_s gives up the whole attempt (written as hung), while its request still has time;
- at start, each readiness probe is one request (request_timeout_s), all of them within reward.server.start_timeout_s.

And a run folder written before the rename (config.yaml with reward.timeout_s) resumes: same reward contract.
"""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
import yaml
from small_run import SMALL_RUN
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.config import renamed_keys
from rlrm.config.loader import load_profile
from rlrm.config.reward import RewardConfig
from rlrm.engine.reward_service import RewardService
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.trainer import start_run, train
from rlrm.launch.fleet.process import ServerStartError

MODEL = "slow-judge"


class SlowJudge:
    """GET /v1/models, and POST /v1/chat/completions answered "Score: 10" after delays[n] s (the last delay
    repeats); `chats` counts the chat requests that arrived, the readiness probe's included."""

    def __init__(self, delays: list[float]):
        self.delays, self.chats = delays, 0
        # bound now and served on in `__aenter__`: the port is never free in between for another process to take
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._runner = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self):
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)  # slow handlers are not waited for
        await self._runner.setup()
        await web.SockSite(self._runner, self._sock).start()
        return self

    async def __aexit__(self, *exc):
        await self._runner.cleanup()
        self._sock.close()

    async def _models(self, request):
        from aiohttp import web

        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def _chat(self, request):
        from aiohttp import web

        await request.read()
        delay = self.delays[min(self.chats, len(self.delays) - 1)]
        self.chats += 1
        await asyncio.sleep(delay)
        message = {"role": "assistant", "content": "Score: 10"}
        usage = {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
        return web.json_response(
            {"object": "chat.completion", "model": MODEL, "choices": [{"index": 0, "message": message}], "usage": usage}
        )


def config(judge: SlowJudge, attempt_s: float, request_s: float, start_s: float = 30.0) -> RewardConfig:
    return RewardConfig.model_validate(
        {
            "kind": "genrm",
            "server": {
                "model": MODEL,
                "addresses": [judge.base_url],
                "request_timeout_s": request_s,
                "start_timeout_s": start_s,
            },
            "attempt_timeout_s": attempt_s,
            "max_retries": 0,
            "max_failure_rate": 1.0,
            "cache": {"enabled": False},  # every sample reaches the judge
        }
    )


SAMPLE = RewardSample("p0", 0, "synthetic", [{"role": "user", "content": "1+2?"}], "#### 3", "3", {"question": "1+2?"})


async def score_one(cfg: RewardConfig):
    """(result, metrics, hung records, last error) of one sample scored by a started service."""
    service = RewardService(cfg)
    await service.start()
    try:
        [result] = await service.loop.score_all([SAMPLE])
        return result, service.loop.take_metrics(), service.loop.take_hung(), service.loop.last_error
    finally:
        await service.close()


def test_a_request_past_request_timeout_fails_while_its_attempt_has_time():
    async def scenario():
        async with SlowJudge([0.0, 10.0]) as judge:  # the readiness probe at once, the sample's request after 10 s
            return await score_one(config(judge, attempt_s=30.0, request_s=2.0)), judge.chats

    (result, metrics, hung, error), chats = asyncio.run(scenario())
    assert chats == 2 and result.extra.get("reward_failed")  # counted and defaulted, never a silent score
    assert metrics["reward/timeouts"] == 1 and metrics["reward/defaulted"] == 1
    assert "/v1/chat/completions did not answer within 2 s (reward.server.request_timeout_s)" in error
    assert hung == []  # the attempt was not given up at its deadline: its request failed first


def test_an_attempt_past_its_deadline_is_given_up_while_its_request_has_time():
    async def scenario():
        async with SlowJudge([0.0, 10.0]) as judge:  # bounds of seconds: a loaded machine's stalls stay inside
            return await score_one(config(judge, attempt_s=2.0, request_s=30.0)), judge.chats

    (result, metrics, hung, error), chats = asyncio.run(scenario())
    assert chats == 2 and result.extra.get("reward_failed")
    assert metrics["reward/timeouts"] == 1 and metrics["reward/defaulted"] == 1
    assert "no reward within reward.attempt_timeout_s=2 s" in error
    assert [(h["uid"], h["attempt"], h["attempt_timeout_s"]) for h in hung] == [("p0", 1, 2.0)]


@pytest.mark.parametrize("request_s, probes", [(2.0, 2), (30.0, 1)])
def test_each_readiness_probe_is_one_request_cut_at_request_timeout(request_s, probes):
    # the first probe's answer takes 6 s: a 2-s request timeout cuts it and the check probes again (answered at
    # once); a 30-s one waits for it. Either way the service starts and scores within start_timeout_s.
    async def scenario():
        async with SlowJudge([6.0, 0.0]) as judge:
            result, *_ = await score_one(config(judge, attempt_s=30.0, request_s=request_s))
            return result, judge.chats

    result, chats = asyncio.run(scenario())
    assert result.score == 1.0 and not result.extra.get("reward_failed")
    assert chats == probes + 1  # the probes, then the sample's one request


def test_readiness_gives_up_at_start_timeout_naming_it():
    async def scenario():
        async with SlowJudge([30.0]) as judge:  # never answers in time
            with pytest.raises(ServerStartError) as refused:
                await RewardService(config(judge, attempt_s=30.0, request_s=2.0, start_s=6.0)).start()
            return str(refused.value), judge.chats

    message, chats = asyncio.run(scenario())
    assert "reward.server.start_timeout_s" in message and "no answer in 2 s" in message
    assert chats >= 2  # probed again after each cut request, until start_timeout_s ran out


SMALL = [*SMALL_RUN, "trainer.save_every=1"]


def test_a_run_folder_with_the_old_key_resumes_with_its_contract(tmp_path, tiny_policy_path, monkeypatch):
    run = start_run(load_profile("tiny-rule", [*SMALL, "trainer.total_steps=1"]), tmp_path / "run")
    assert train(run).last_step == 1
    fingerprint = json.loads((run / "reward_contract.json").read_text())["fingerprint"]
    config = run / "config.yaml"
    raw = yaml.safe_load(config.read_text())
    del raw["reward"]["attempt_timeout_s"], raw["reward"]["server"]["request_timeout_s"]
    raw["reward"]["timeout_s"] = 20.0  # as an rlrm from before the rename wrote it
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    (run / "checkpoints" / "step_1" / "profile.json").unlink()  # nor did it record its profile in a checkpoint
    monkeypatch.setattr(renamed_keys, "_noted", set())
    resumed = CliRunner().invoke(app, ["train", "--resume", str(run), "--steps", "2", "--console", "none"])
    assert resumed.exit_code == 0 and f"done: 2 steps in {run}" in resumed.stdout, resumed.output
    notes = [line for line in resumed.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "reward.timeout_s is now reward.attempt_timeout_s" in notes[0]
    # the contract check on resume passed (a changed contract stops it) and the contract file is unchanged
    assert json.loads((run / "reward_contract.json").read_text())["fingerprint"] == fingerprint
    reward = yaml.safe_load(config.read_text())["reward"]  # --steps wrote config.yaml again: the new keys
    assert "timeout_s" not in reward
    assert (reward["attempt_timeout_s"], reward["server"]["request_timeout_s"]) == (20.0, 20.0)
