"""API keys of the reward servers: read from the environment, never from a command line, and checked
in constant time.

    key = key_from_env("RLRM_API_KEY", "--api-key-env")       # ConfigError when unset
    authorized(b"bearer s3cret", key)                          # True: the scheme is case-insensitive

A key on a command line is readable by every local user (`ps`, /proc/<pid>/cmdline); an
environment variable is readable only by the process owner (/proc/<pid>/environ is mode 0400).
So rlrm passes keys to the servers it launches in `ENV_VAR`, and profiles name a variable
(`reward.server.api_key_env`) instead of holding the key.
"""

from __future__ import annotations

import hmac
import os

from rlrm.errors import ConfigError

ENV_VAR = "RLRM_API_KEY"  # what `rlrm launch server` and the servers rlrm launches read by default


def key_from_env(name: str, what: str) -> str:
    """The key held by environment variable `name`; a one-line error naming `what` when it is unset or empty."""
    value = os.environ.get(name, "")
    if not value.strip():
        raise ConfigError(
            f"{what} names the environment variable {name}, which is not set (or empty) here; export {name}=<key>"
        )
    return value.strip()


def authorized(header: bytes, key: str) -> bool:
    """Whether an Authorization header value carries `key` (`Bearer KEY`, the scheme in any case)."""
    scheme, _, token = header.strip().partition(b" ")
    # compare_digest: the time taken does not tell an attacker how much of the key matched
    return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), key.encode())
