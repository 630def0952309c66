"""A hosted judge's headers variable that does not hold a JSON object of strings is refused."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rlrm.config.loader import validate_model
from rlrm.config.reward import RewardConfig
from rlrm.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        ({"Authorization": "MY_KEY"}, "the Authorization header is api_key_env's"),
        ({"OpenAI-Organization": "org-123-value"}, "is not an environment variable name"),
        ({"Bad Header": "ORG"}, "is not an HTTP header name"),
    ],
)
def test_bad_headers_env_is_refused(headers, said):
    raw = {"kind": "genrm", "server": {"model": "m", "addresses": ["http://127.0.0.1:9/v1"], "headers_env": headers}}
    with pytest.raises(ConfigError) as refused:
        validate_model(raw, RewardConfig, "profile")
    assert said in str(refused.value) and "\n" not in str(refused.value)
