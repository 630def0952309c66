"""API keys of the servers: read from the environment, never from a command line, and checked in constant time.

    key = key_from_env("RLRM_API_KEY", "--api-key-env")       # ConfigError when unset
    key = new_run_key()                                        # a run's own servers: a fresh key by default
    authorized(b"bearer s3cret", key)                          # True: the scheme is case-insensitive
    check_bind("0.0.0.0", None, allow_unauthenticated=False)   # ConfigError: no key off loopback unless asked

A key on a command line is readable by every local user (`ps`, /proc/<pid>/cmdline); an
environment variable is readable only by the process owner (/proc/<pid>/environ is mode 0400).
So rlrm passes keys to the servers it launches in `ENV_VAR`, and profiles name a variable
(`reward.server.api_key_env`) instead of holding the key.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets

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


def new_run_key() -> str:
    """A fresh random key for the servers one run launches (256 bits, URL-safe): in their environment, never saved."""
    return secrets.token_urlsafe(32)


def check_bind(
    host: str, api_key: str | None, allow_unauthenticated: bool, flag: str = "--allow-unauthenticated"
) -> None:
    """ConfigError for a server about to listen on an address other than loopback with no key, unless `flag` was given."""
    if api_key or allow_unauthenticated or _is_loopback(host):
        return
    raise ConfigError(
        f"refusing to serve on {host or 'every address'} without an API key: anyone who reaches this machine could "
        f"generate and load weights; set {ENV_VAR} (or --api-key-env NAME), bind 127.0.0.1, or pass {flag} to serve "
        "without a key on purpose"
    )


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def authorized(header: bytes, key: str) -> bool:
    """Whether an Authorization header value carries `key` (`Bearer KEY`, the scheme in any case)."""
    scheme, _, token = header.strip().partition(b" ")
    # compare_digest: the time taken does not tell an attacker how much of the key matched
    return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), key.encode())
