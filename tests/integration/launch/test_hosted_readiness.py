"""A hosted judge that cannot serve is found out at start, and said in one line: a model it does not list and a
certificate nobody trusts at once; a 500, a 429 or no answer retried until start_timeout_s, with what it got said
while waiting and in the final line (a real HTTP(S) server of the test's own on loopback, rlrm's real client)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.reward_service import RewardService
from rlrm.launch.common import progress
from rlrm.launch.fleet.process import ServerStartError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from odd_judge_api import OddJudgeAPI, self_signed  # noqa: E402


def config(url: str, start_timeout_s: float = 120, model: str = "odd-judge", timeout_s: float = 30) -> RewardConfig:
    return RewardConfig.model_validate(
        {
            "kind": "genrm",
            "server": {
                "model": model,
                "addresses": [url],
                "api_key_env": "ODD_KEY",
                "start_timeout_s": start_timeout_s,
                "request_timeout_s": timeout_s,
            },
        }
    )


def refused(cfg: RewardConfig) -> tuple[str, float]:
    """The one line the start was refused with, and how long it took."""
    start = time.monotonic()
    with pytest.raises(ServerStartError) as error:
        asyncio.run(RewardService(cfg).start())
    return str(error.value), time.monotonic() - start


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("ODD_KEY", "sk-odd-0123")


@pytest.fixture
def said(monkeypatch, capfd):
    """The progress lines said while waiting (a line a second rather than every 10 s)."""
    monkeypatch.setattr(progress, "EVERY_S", 1.0)
    progress.enable()
    yield lambda: capfd.readouterr().err
    progress.enable(False)


def test_a_model_the_api_does_not_list_is_refused_at_once_naming_both():
    with OddJudgeAPI(models=["gpt-4o", "gpt-4o-mini"]) as api:
        message, elapsed = refused(config(api.base_url, model="gpt-4o-mni"))
        chats = api.requests["/v1/chat/completions"]
    assert "GET /v1/models lists 'gpt-4o', 'gpt-4o-mini', not 'gpt-4o-mni'" in message, message
    assert "reward.server.model" in message and "\n" not in message
    assert elapsed < 120 / 4 and chats == 0  # at once, before any judge request


def test_the_model_it_lists_passes():
    async def scenario(url):
        service = RewardService(config(url, model="gpt-4o-mini"))
        await service.start()
        await service.close()

    with OddJudgeAPI(models=["gpt-4o", "gpt-4o-mini"], model="gpt-4o-mini") as api:
        asyncio.run(scenario(api.base_url))
        assert api.requests["/v1/chat/completions"] == 1  # the readiness probe went on to the judge's endpoint


@pytest.mark.parametrize(
    "status, what",
    [(500, "GET /v1/models answered 500: The server had an error"), (429, "answered 429 (rate limited)")],
)
def test_an_api_that_keeps_failing_is_named_while_waiting_and_in_the_last_line(said, status, what):
    with OddJudgeAPI(status=status) as api:
        message, elapsed = refused(config(api.base_url, start_timeout_s=3))
        asked = api.requests["/v1/models"]
    assert what in message and "still after 3 s: reward.server.start_timeout_s" in message and "\n" not in message
    waiting = [line for line in said().splitlines() if what in line]
    assert waiting and all("reward.server.start_timeout_s" in line for line in waiting), waiting
    assert asked >= 3  # retried: a 5xx or a 429 may pass


def test_an_api_that_answers_too_late_is_named_with_the_seconds_waited(said):
    # answers after 30 s: each probe waits reward.server.request_timeout_s (1 s), and the start gives up at start_timeout_s
    with OddJudgeAPI(delay_s=30) as api:
        message, elapsed = refused(config(api.base_url, start_timeout_s=3, timeout_s=1))
    assert "no answer in 1 s (still after 3 s: reward.server.start_timeout_s)" in message, message
    assert elapsed < 30  # never waited out the 30 s answer
    assert "no answer in 1 s" in said()


def test_a_certificate_nobody_trusts_is_one_line_at_once_and_ssl_cert_file_trusts_it(tmp_path):
    pytest.importorskip("cryptography")
    cert = self_signed(tmp_path)
    with OddJudgeAPI(certificate=cert) as api:
        message, elapsed = refused(config(api.base_url))
        # the line's advice holds: a process started with SSL_CERT_FILE naming the certificate reaches the judge
        script = textwrap.dedent(
            f"""
            import asyncio
            from rlrm.config.reward import RewardConfig
            from rlrm.engine.reward_service import RewardService
            cfg = RewardConfig.model_validate({config(api.base_url, start_timeout_s=30).model_dump(mode="json")!r})
            async def main():
                service = RewardService(cfg)
                await service.start()
                await service.close()
            asyncio.run(main())
            print("started")
            """
        )
        env = {**os.environ, "SSL_CERT_FILE": str(cert[0]), "PYTHONPATH": str(FIXTURES.parents[1])}
        trusted = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        chats = api.requests["/v1/chat/completions"]
    assert "its TLS certificate failed verification (self-signed certificate)" in message, message
    assert "SSL_CERT_FILE" in message and "\n" not in message and elapsed < 120 / 4
    assert trusted.returncode == 0 and trusted.stdout.strip() == "started", trusted.stderr[-2000:]
    assert chats == 1  # only the trusted process got as far as the judge


def test_plain_http_at_an_https_address_is_one_line_at_once():
    with OddJudgeAPI() as api:
        message, elapsed = refused(config(api.base_url.replace("http://", "https://")))
    assert "the TLS handshake failed" in message and "https" in message and "\n" not in message, message
    assert elapsed < 120 / 4


def test_a_server_that_does_not_do_the_endpoint_is_final_at_once_in_one_line():
    """A server that is up (GET /health 200) but answers the reward's POST with 501 and an HTML page, as Python's
    http.server does: not a failure to wait out (a 5xx that may pass), and the page's words, not its markup."""
    import http.server
    import threading

    import aiohttp

    from rlrm.launch.fleet.health import _probe

    class Up(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Up)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    async def probe():
        async with aiohttp.ClientSession() as session:
            return await _probe(session, f"http://127.0.0.1:{server.server_port}", "/classify", {"input": "x"}, 5.0)

    try:
        what, final = asyncio.run(probe())
    finally:
        server.shutdown()
    assert final and what is not None and "\n" not in what and "<" not in what, what
    assert what.startswith("POST /classify answered 501:") and "is this an inference server?" in what
