"""A judge behind a hosted, rate-limited OpenAI-compatible API (a stand-in of the test's own, on loopback):
reached at its base URL with no /health, kept under its limit by reward.limits, its 429s waited out as it
says (Retry-After) and counted, never scored 0 in silence, and its tokens and cost counted."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.reward_service import RewardService
from rlrm.engine.rewards.base import RewardSample
from rlrm.launch.fleet.process import ServerStartError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
from small_run import SMALL_RUN, as_set_args  # noqa: E402
from standin_openai_api import StandinOpenAIAPI  # noqa: E402

KEY = "sk-standin-0123456789"
TEMPLATE = "Problem: {question}\nAnswer: {response}\nReference answer: {reference}\nSay Score: 10 or Score: 0."


def samples(n: int, offset: int = 0) -> list[RewardSample]:
    # every other answer is right, each prompt is unique (the stand-in tells retries apart by it)
    return [
        RewardSample(
            uid=f"p{i}",
            index=i,
            data_source="synthetic",
            prompt=[{"role": "user", "content": f"q{i}"}],
            solution_str=f"work {i} #### {i if i % 2 == 0 else i + 1}",
            ground_truth=str(i),
            extra_info={"question": f"what is {i}?"},
        )
        for i in range(offset, offset + n)
    ]


def config(api: StandinOpenAIAPI, **over) -> RewardConfig:
    base = {
        "kind": "genrm",
        "num_workers": 4,
        "server": {
            "model": api.model,
            "addresses": [api.base_url],
            "api_key_env": "STANDIN_KEY",
            "request_timeout_s": 60,
        },
        "genrm": {"template": TEMPLATE, "max_tokens": 8},
        "attempt_timeout_s": 60,
        "max_failure_rate": 1.0,
    }
    for key, value in over.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return RewardConfig.model_validate(base)


def score(cfg: RewardConfig, batch: list[RewardSample]):
    async def scenario():
        service = RewardService(cfg)
        await service.start()
        try:
            return await service.loop.score_all(batch), service.loop.take_metrics()
        finally:
            await service.close()

    return asyncio.run(scenario())


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("STANDIN_KEY", KEY)


def test_at_the_limit_no_429_and_throughput_near_it():
    rpm = 300.0  # 5 requests a second
    with StandinOpenAIAPI(KEY, rpm=rpm) as api:
        # 12 workers: a round trip of up to 2.4 s (a loaded machine) still leaves the limiter setting the pace
        # (with 4, a CI run beside other work read 0.77x: every worker was waiting on an answer, not the limiter)
        results, metrics = score(config(api, limits={"rpm": rpm}, num_workers=12), samples(24))
        times = [t for t, _ in api.accepted]
    assert not api.throttled and metrics["reward/rate_limited"] == 0
    assert [r.score for r in results] == [1.0 if i % 2 == 0 else 0.0 for i in range(24)]
    # the readiness probe is the first request the stand-in let in; the 24 judge calls follow
    calls = times[1:]
    rate = (len(calls) - 1) / (calls[-1] - calls[0]) * 60.0  # requests per minute over the scoring
    assert rate <= rpm * 1.1, rate
    # the pace the limiter sets: the median gap between calls is its spacing, 60/rpm, within 10% below and 30% above
    # (late wake-ups only widen gaps). The median, not
    # the mean: a starved CPU wakes a worker after its slot, which gives the slot back (limits.LATE_S), and each such
    # stall lowers the rate over the whole scoring (CI beside the vLLM tests read 0.88x) without moving the median.
    # A limiter that spaces calls wider than it must (or serializes them behind the answers) moves the median.
    gaps = sorted(b - a for a, b in zip(calls, calls[1:]))
    median = gaps[len(gaps) // 2]
    assert 0.9 * 60.0 / rpm <= median <= 1.3 * 60.0 / rpm, (median, gaps)
    assert metrics["reward/model_calls"] == 24 and metrics["reward/defaulted"] == 0
    assert metrics["reward/throttle_wait_s"] > 0  # the limiter paced them, and said so


def test_without_limits_429s_are_waited_out_as_told_and_nothing_is_defaulted():
    with StandinOpenAIAPI(KEY, rpm=300, burst=3) as api:
        results, metrics = score(config(api), samples(16))
        accepted, throttled = list(api.accepted), list(api.throttled)
    assert throttled, "the stand-in never had to refuse: the test measures nothing"
    assert all(not r.extra.get("reward_failed") for r in results) and metrics["reward/defaulted"] == 0
    assert [r.score for r in results] == [1.0 if i % 2 == 0 else 0.0 for i in range(16)]
    assert metrics["reward/rate_limited"] == len(throttled)
    assert metrics["reward/failures"] == 0 and metrics["reward/retries"] == 0  # a 429 is not a failure
    # each refused request came back no sooner than its Retry-After said
    gaps = []
    for when, prompt, said in throttled:
        again = min(t for t, p in accepted + [(x, q) for x, q, _ in throttled] if p == prompt and t > when)
        gaps.append((again - when) / said)
    assert min(gaps) >= 0.98, gaps
    assert metrics["reward/throttle_wait_s"] >= sum(said for _, _, said in throttled) * 0.98


def test_tokens_and_cost_are_counted_from_the_usage_it_returns():
    with StandinOpenAIAPI(KEY, rpm=6000) as api:
        cfg = config(api, genrm={"price_per_mtok_input": 2.5, "price_per_mtok_output": 10.0})
        _, metrics = score(cfg, samples(6))
        usage = dict(api.usage)
    # the stand-in also counted the readiness probe ("Say OK.", answered in 6 words): not a reward call
    probe_prompt = len(json.dumps([{"role": "user", "content": "Say OK."}])) // 4
    assert metrics["reward/judge_prompt_tokens"] == usage["prompt_tokens"] - probe_prompt
    assert metrics["reward/judge_completion_tokens"] == usage["completion_tokens"] - 6
    expected = (metrics["reward/judge_prompt_tokens"] * 2.5 + metrics["reward/judge_completion_tokens"] * 10.0) / 1e6
    assert metrics["reward/cost"] == pytest.approx(expected) and metrics["reward/cost"] > 0


def test_the_run_summary_says_what_the_judge_cost(tmp_path, tiny_policy_path):
    from typer.testing import CliRunner

    from rlrm.cli.main import app
    from rlrm.engine.metrics.metrics_file import read_metrics

    with StandinOpenAIAPI(KEY, rpm=6000) as api:
        sets = [
            *SMALL_RUN,
            "trainer.total_steps=2",
            "data.train_batch_size=2",
            "actor.mini_batch_size=2",
            "reward.kind=genrm",
            f"reward.server.model={api.model}",
            f"reward.server.addresses={api.base_url}",
            "reward.server.api_key_env=STANDIN_KEY",
            "reward.genrm.price_per_mtok_input=2.5",
            "reward.genrm.price_per_mtok_output=10",
        ]
        args = ["train", "--profile", "tiny-rule", "--out", str(tmp_path / "run")]
        result = CliRunner().invoke(app, [*args, *as_set_args(*sets)])
    assert result.exit_code == 0, result.output
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "reward/cost" in r]
    assert len(rows) == 2 and all(r["reward/cost"] > 0 for r in rows)
    summed = sum(r["reward/cost"] for r in rows)
    done = next(line for line in result.output.splitlines() if line.startswith("done: "))  # the closing lines follow
    assert f"reward cost {summed:.4f}" in done, done
    assert f"  reward model cost {summed:.4f} (reward/cost)" in result.output.splitlines(), result.output


def test_a_wrong_key_fails_at_once_with_one_line(monkeypatch):
    monkeypatch.setenv("STANDIN_KEY", "wrong")
    with StandinOpenAIAPI(KEY, rpm=600) as api:
        cfg = config(api, server={"start_timeout_s": 120})
        start = time.monotonic()
        with pytest.raises(ServerStartError) as refused:
            asyncio.run(RewardService(cfg).start())
        elapsed = time.monotonic() - start
    message = str(refused.value)
    assert "GET /v1/models answered 401" in message and "api_key_env" in message and "\n" not in message
    assert elapsed < 120 / 4  # at once, not after start_timeout_s
    assert "wrong" not in message and KEY not in message


@pytest.mark.parametrize(
    "standin, said",
    [
        ({"retry_after": "3600"}, "asked to retry after 3600 s; waiting reward.limits.max_retry_after_s=0.3 s"),
        ({"retry_after": None}, None),  # no Retry-After: the loop's backoff
        ({"retry_after": "soon", "plain_429": True}, None),  # unreadable header, HTML body
        ({"retry_after": "nan"}, None),  # unreadable: the backoff, not 0 s (a retry at once, refused again)
        ({"retry_after": "0"}, None),  # "at once" from a server still refusing: the backoff too
        ({"throttle_status": 503}, None),  # a gateway's 503 with Retry-After: waited out like a 429
    ],
)
def test_odd_429s_are_still_waited_out_and_counted(standin, said, capfd):
    with StandinOpenAIAPI(KEY, rpm=600, burst=2, **standin) as api:  # 8 samples, 4 at a time: some refused
        cfg = config(api, limits={"max_retry_after_s": 0.3}, backoff_s=0.05, backoff_max_s=0.3)
        results, metrics = score(cfg, samples(8))
        throttled = len(api.throttled)
    assert throttled and metrics["reward/rate_limited"] == throttled
    assert metrics["reward/defaulted"] == 0 and [r.score for r in results] == [1.0, 0.0] * 4
    err = capfd.readouterr().err
    if said:
        assert err.count(said) == 1  # said once, not once per 429


TPM = 24_000.0  # 400 tokens a second; a judge call here costs ~40 tokens (usage) and is estimated at ~100


def token_rate(api: StandinOpenAIAPI) -> float:
    """Tokens per minute the stand-in let in over the scoring (the readiness probe, first, left out): each accepted
    request but the last is followed by the gap its tokens buy."""
    times = [t for t, _ in api.accepted]
    return sum(api.accepted_tokens[1:-1]) / (times[-1] - times[1]) * 60.0


def median_pace(accepted, tokens) -> float:
    """The median over consecutive requests of the tokens per minute each gap paid for: the request's tokens over
    the gap to the next. The limiter's pace, where the mean is not: a starved CPU that wakes a worker late stretches
    a few gaps, and lowers a rate over the whole scoring, without moving the median."""
    rates = sorted(used / (b[0] - a[0]) * 60.0 for a, b, used in zip(accepted, accepted[1:], tokens))
    return rates[len(rates) // 2]


def test_at_the_token_limit_no_429_and_every_sample_scored():
    # many samples in flight at once: each takes its slot of the token schedule at its estimate (max_tokens 64 plus
    # its prompt at 4 characters a token), so the API sees fewer tokens than its limit, never more
    with StandinOpenAIAPI(KEY, rpm=60_000, tpm=TPM) as api:
        results, metrics = score(config(api, limits={"tpm": TPM}, genrm={"max_tokens": 64}), samples(12))
        rate = token_rate(api)
    assert not api.throttled and metrics["reward/rate_limited"] == 0
    assert [r.score for r in results] == [1.0 if i % 2 == 0 else 0.0 for i in range(12)]
    assert metrics["reward/defaulted"] == 0 and metrics["reward/model_calls"] == 12
    assert rate <= TPM * 1.1, rate


def test_usage_corrects_the_token_budget_up_to_the_limit():
    # one request at a time: each answer's usage (~40 tokens) corrects its estimate (~100) before the next request
    # takes its slot, so the API sees its limit, not the ~40% the estimates alone would allow. A quarter of TPM:
    # with one request in flight the next cannot go before the answer, so the gap ~40 tokens buy (0.4 s here) must
    # stay above a loaded machine's round trip (at TPM, 0.1 s: a CI run's round trips paced it at 0.51x)
    tpm = TPM / 4
    with StandinOpenAIAPI(KEY, rpm=60_000, tpm=tpm) as api:
        cfg = config(api, limits={"tpm": tpm, "max_concurrent": 1}, genrm={"max_tokens": 64})
        results, metrics = score(cfg, samples(8))
        rate = token_rate(api)
        pace = median_pace(api.accepted[1:], api.accepted_tokens[1:])
    assert not api.throttled and metrics["reward/defaulted"] == 0
    assert [r.score for r in results] == [1.0 if i % 2 == 0 else 0.0 for i in range(8)]
    # holding the estimates paces it at 0.39x (measured, the correction in RateLimiter.release off); a quiet machine
    # at 1.00x. Over the whole scoring a loaded CI machine's round trips read 0.746x once (at 8c99c51): the floor is
    # on the median pace, which those stalls leave alone
    assert rate <= 1.1 * tpm, rate
    assert 0.8 * tpm <= pace, pace / tpm


def test_in_flight_samples_hold_what_recent_answers_used_not_their_estimates():
    # many samples in flight: the first wave holds its estimates (~100 tokens, before any usage came back); later
    # waves hold what recent answers used (~40, plus 5%), so the API sees close to its limit and never more
    async def scenario(api):
        # every sample of a wave in flight at once: the 0.1-s gap ~40 tokens buy then leaves a round trip 1.2 s, not
        # the 0.4 s of 4 workers (a loaded CI run's round trips paced it at 0.635x)
        service = RewardService(config(api, num_workers=12, limits={"tpm": TPM}, genrm={"max_tokens": 64}))
        await service.start()
        try:
            marks = []
            for wave in range(3):
                marks.append(len(api.accepted))
                await service.loop.score_all(samples(12, offset=12 * wave))
            return marks, service.loop.take_metrics()
        finally:
            await service.close()

    with StandinOpenAIAPI(KEY, rpm=60_000, tpm=TPM) as api:
        marks, metrics = asyncio.run(scenario(api))
        waves = [(api.accepted[a:b], api.accepted_tokens[a:b]) for a, b in zip(marks[1:], [*marks[2:], None])]
    assert not api.throttled and metrics["reward/defaulted"] == 0
    # the pace inside waves 2 and 3: each request but a wave's last is followed by the gap its tokens buy. The pause
    # between two waves (the last answer, then the next score_all) has nothing in flight, so it is left out: counted
    # in, a loaded machine's slow last answer read as a slow limiter (0.849x in a CI run)
    tokens = sum(sum(used[:-1]) for _, used in waves)
    seconds = sum(accepted[-1][0] - accepted[0][0] for accepted, _ in waves)
    rate = tokens / seconds * 60.0
    pace = min(median_pace(accepted, used) for accepted, used in waves)
    # holding the estimates (~100 tokens for ~40 used) paces each wave at 0.40x its limit (measured, with
    # MeteredBalancer.charge returning the estimate); a quiet machine at 0.95x. Over the waves a loaded CI machine's
    # round trips read 0.667x once (at c3279fc): the floor is on each wave's median pace, which those stalls leave alone
    assert rate <= 1.1 * TPM, rate
    assert 0.8 * TPM <= pace, pace / TPM


def test_without_token_limits_the_stand_in_refuses_and_nothing_is_defaulted():
    # the stand-in does enforce tpm: with no reward.limits its 429s come, are waited out, and every sample is scored
    with StandinOpenAIAPI(KEY, rpm=60_000, tpm=TPM) as api:
        results, metrics = score(config(api, genrm={"max_tokens": 64}), samples(12))
        throttled = len(api.throttled)
    assert throttled and metrics["reward/rate_limited"] == throttled
    assert metrics["reward/defaulted"] == 0 and [r.score for r in results] == [1.0, 0.0] * 6


def test_an_api_that_keeps_refusing_fails_the_sample_at_its_deadline_counted():
    # one request a minute, and the readiness probe took it: every judge call is refused until the deadline; the
    # samples end as counted timeouts with default scores, their 429s counted apart, never a silent score
    with StandinOpenAIAPI(KEY, rpm=1.0, burst=1.0) as api:
        cfg = config(api, attempt_timeout_s=1.0, max_retries=0, limits={"max_retry_after_s": 0.2})
        results, metrics = score(cfg, samples(3))
        throttled = len(api.throttled)
    # each 429 the loop read is counted; one the stand-in sent as a sample's deadline cut its request off was never
    # read (2 of 9 in a loaded CI run), so the stand-in may count more
    assert throttled >= 3 and 3 <= metrics["reward/rate_limited"] <= throttled
    assert metrics["reward/timeouts"] == 3 and metrics["reward/failures"] == 3 and metrics["reward/defaulted"] == 3
    assert all(r.extra.get("reward_failed") for r in results)


def test_a_base_url_the_api_does_not_serve_fails_at_once_with_one_line():
    with StandinOpenAIAPI(KEY, rpm=600) as api:
        cfg = config(api, server={"addresses": [api.base_url.removesuffix("/v1") + "/api"], "start_timeout_s": 120})
        start = time.monotonic()
        with pytest.raises(ServerStartError) as refused:
            asyncio.run(RewardService(cfg).start())
        elapsed = time.monotonic() - start
    message = str(refused.value)
    assert "serves neither GET /health nor GET /v1/models (404)" in message and "base URL" in message
    assert "\n" not in message and elapsed < 120 / 4


def test_a_model_name_the_api_does_not_serve_is_one_line_with_both_names():
    with StandinOpenAIAPI(KEY, rpm=600) as api:
        cfg = config(api, server={"served_model_name": "gpt-judge-v2"})
        with pytest.raises(ServerStartError) as refused:
            asyncio.run(RewardService(cfg).start())
    message = str(refused.value)
    assert "'standin-judge'" in message and "'gpt-judge-v2'" in message and "served_model_name" in message


def test_a_hosted_judge_is_named_by_its_models_entry_and_asked_once_per_judgement():
    async def scenario(api):
        service = RewardService(config(api))
        await service.start()
        try:
            first = await service.loop.score_all(samples(6))
            calls = service.loop.take_metrics()
            again = await service.loop.score_all(samples(6))  # a resumed run, an audit, an epoch: the same asks
            return service.contract, first, again, calls, service.loop.take_metrics()
        finally:
            await service.close()

    with StandinOpenAIAPI(KEY, rpm=6000) as api:
        contract, first, again, calls, cached = asyncio.run(scenario(api))
        asked = len(api.accepted)
    assert contract.parts["model"] == {"name": api.model, "served": {"id": api.model, "object": "model"}}
    assert contract.parts["dtype"] == {"scorer": "served", "dtype": None, "backend": None}
    assert calls["reward/model_calls"] == 6 and calls["reward/cache_misses"] == 6
    assert cached["reward/model_calls"] == 0 and cached["reward/cache_hits"] == 6
    assert cached["reward/cache_saved_model_calls"] == 6 and cached["reward/cache_saved_completion_tokens"] > 0
    assert [r.score for r in again] == [r.score for r in first] == [1.0 if i % 2 == 0 else 0.0 for i in range(6)]
    assert all(r.extra["reward_cached"] for r in again) and asked <= 6 + 1  # the readiness probe and 6 judgements
