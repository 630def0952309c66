"""reward.server.headers_env: extra headers a hosted judge API insists on (an organisation, a project), read from
named environment variables at start and sent with every request, the readiness check included; their values never
reach a profile or the run folder. Against the stand-in API of tests/fixtures (a server of the test's own)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
from pathlib import Path

import pytest

from rlrm.config.loader import load_profile
from rlrm.config.reward import RewardConfig
from rlrm.engine.reward_service import RewardService
from rlrm.engine.rewards.base import RewardSample
from rlrm.errors import ConfigError
from rlrm.launch.fleet.process import ServerStartError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
from small_run import SMALL_RUN  # noqa: E402
from standin_openai_api import StandinOpenAIAPI  # noqa: E402

KEY = "sk-standin-headers-0123"
ORG = "org-standin-5f3a9c1e7b"  # the value the API wants; only the environment holds it
TEMPLATE = "Problem: {question}\nAnswer: {response}\nReference answer: {reference}\nSay Score: 10 or Score: 0."


@pytest.fixture(autouse=True)
def env(monkeypatch):
    monkeypatch.setenv("STANDIN_KEY", KEY)
    monkeypatch.setenv("STANDIN_ORG", ORG)


def config(api: StandinOpenAIAPI, **server) -> RewardConfig:
    base = {"model": api.model, "addresses": [api.base_url], "api_key_env": "STANDIN_KEY", **server}
    return RewardConfig.model_validate(
        {"kind": "genrm", "server": base, "genrm": {"template": TEMPLATE, "max_tokens": 8}, "max_failure_rate": 1.0}
    )


def samples(n: int) -> list[RewardSample]:
    return [
        RewardSample(f"p{i}", i, "synthetic", [], f"so #### {i if i % 2 == 0 else -1}", str(i), {"question": f"q{i}"})
        for i in range(n)
    ]


def score(cfg: RewardConfig, batch: list[RewardSample]):
    async def scenario():
        service = RewardService(cfg)
        await service.start()
        try:
            return await service.loop.score_all(batch), service.loop.take_metrics()
        finally:
            await service.close()

    return asyncio.run(scenario())


def test_headers_reach_every_request_readiness_check_included():
    with StandinOpenAIAPI(KEY, rpm=6000, required_headers={"OpenAI-Organization": ORG}) as api:
        results, metrics = score(config(api, headers_env={"OpenAI-Organization": "STANDIN_ORG"}), samples(6))
        refused, accepted = list(api.missing_headers), len(api.accepted)
    assert refused == [] and accepted == 1 + 6  # the readiness probe's chat call, then one per sample
    assert [r.score for r in results] == [1.0, 0.0] * 3 and metrics["reward/failures"] == 0


def test_without_the_header_the_api_refuses_at_the_readiness_check():
    # the stand-in does enforce the header: without headers_env the start fails at once, on GET /v1/models
    with StandinOpenAIAPI(KEY, rpm=6000, required_headers={"OpenAI-Organization": ORG}) as api:
        start = time.monotonic()
        with pytest.raises(ServerStartError) as refused:
            asyncio.run(RewardService(config(api, start_timeout_s=120)).start())
        assert api.missing_headers == ["/v1/models"]
    assert "GET /v1/models answered 401" in str(refused.value) and time.monotonic() - start < 30


def test_an_unset_variable_is_one_line_naming_it(monkeypatch):
    monkeypatch.delenv("STANDIN_ORG")
    with StandinOpenAIAPI(KEY, rpm=6000) as api:
        with pytest.raises(ConfigError) as refused:
            asyncio.run(RewardService(config(api, headers_env={"OpenAI-Organization": "STANDIN_ORG"})).start())
        assert not api.accepted and not api.seen_keys  # nothing was sent
    message = str(refused.value)
    assert "reward.server.headers_env.OpenAI-Organization" in message and "STANDIN_ORG" in message
    assert "\n" not in message


def test_the_value_never_lands_in_the_run_folder(tmp_path, tiny_policy_path, capfd):
    from rlrm.engine.trainer import start_run, train

    with StandinOpenAIAPI(KEY, rpm=6000, required_headers={"OpenAI-Organization": ORG}) as api:
        profile = load_profile(
            "tiny-rule",
            [
                *SMALL_RUN,
                "trainer.total_steps=1",
                "logging.save_samples=true",
                "reward.kind=genrm",
                f"reward.server.model={api.model}",
                f"reward.server.addresses={api.base_url}",
                "reward.server.api_key_env=STANDIN_KEY",
                "reward.server.headers_env={OpenAI-Organization: STANDIN_ORG}",
                "reward.cache.enabled=false",  # every sample asks the API: the headers go with each call
                "logging.console=plain",  # the step lines a user's log keeps
            ]
            # a tracker writes the resolved profile and every row into the run folder too
            + (["logging.trackers=tensorboard"] if importlib.util.find_spec("tensorboard") else []),
        )
        run_dir = start_run(profile, tmp_path / "run")
        train(run_dir)
        assert api.missing_headers == [] and len(api.accepted) >= 1 + 8
    out, err = capfd.readouterr()
    assert "step 1/1" in out  # the log was written, and holds neither
    assert ORG not in out + err and KEY not in out + err
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert not importlib.util.find_spec("tensorboard") or any("tfevents" in p.name for p in files)
    assert any(p.name == "config.yaml" for p in files) and "STANDIN_ORG" in (run_dir / "config.yaml").read_text()
    for path in files:
        data = path.read_bytes()
        assert ORG.encode() not in data and KEY.encode() not in data, path
