"""A hosted judge's settings and Retry-After parsing, without a server."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from rlrm.config.loader import validate_model
from rlrm.config.reward import RewardConfig
from rlrm.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))


def test_bad_limits_and_credentials_in_the_url_are_refused():
    for bad in ({"rpm": 0}, {"tpm": -5}, {"rpm": float("nan")}, {"max_concurrent": 0}, {"typo": 1}):
        with pytest.raises(ValidationError):
            RewardConfig.model_validate({"limits": bad})
    with pytest.raises(ConfigError) as refused:
        validate_model(
            {"kind": "genrm", "server": {"model": "m", "addresses": ["https://user:s3cret@api.example.com/v1"]}},
            RewardConfig,
            "profile",
        )
    message = str(refused.value)
    assert "api_key_env" in message and "credentials" in message and "s3cret" not in message
    for url in ("https://api.example.com/v1?api_key=s3cret", "https://api.example.com/v1#key=s3cret"):
        with pytest.raises(ConfigError) as refused:  # a key in the query string is never echoed back
            validate_model({"kind": "genrm", "server": {"model": "m", "addresses": [url]}}, RewardConfig, "profile")
        message = str(refused.value)
        assert "s3cret" not in message and "api_key_env" in message and "query" in message, message
    # a rate so low that requests would wait past reward.attempt_timeout_s for their turn: refused at start, one line
    with pytest.raises(ConfigError) as refused:
        validate_model({"attempt_timeout_s": 30, "limits": {"rpm": 1e-9}}, RewardConfig, "profile")
    message = str(refused.value)
    assert "reward.limits.rpm=1e-09" in message and "reward.attempt_timeout_s=30" in message and "at least 2" in message
    assert "\n" not in message
    RewardConfig.model_validate({"attempt_timeout_s": 30, "limits": {"rpm": 2}})  # one request every 30 s: allowed


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("3", 3.0),
        ("0", 0.0),
        ("-4", 0.0),
        ("inf", float("inf")),
        ("nan", None),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_is_read_as_seconds_or_not_at_all(header, seconds):
    from rlrm.call_errors import retry_after_s

    assert retry_after_s(header) == seconds


def test_retry_after_as_an_http_date():
    from email.utils import formatdate

    from rlrm.call_errors import retry_after_s

    assert 8.0 <= retry_after_s(formatdate(time.time() + 10, usegmt=True)) <= 10.0
    assert retry_after_s(formatdate(time.time() - 10, usegmt=True)) == 0.0
